package calc

import "testing"

func TestAdd(t *testing.T) {
	if got := Add(2, 2); got != 4 {
		t.Errorf("Add(2, 2) = %d, want 4", got)
	}
}

func TestDiv(t *testing.T) {
	cases := []struct {
		name   string
		a, b   int
		want   int
		wantOK bool
	}{
		{"exact", 6, 3, 2, true},
		{"by zero", 1, 0, 0, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, ok := Div(c.a, c.b)
			if got != c.want || ok != c.wantOK {
				t.Fatalf("Div(%d, %d) = %d, %v; want %d, %v", c.a, c.b, got, ok, c.want, c.wantOK)
			}
		})
	}
}

func TestPasses(t *testing.T) {}
