package boom

import "testing"

func TestThird(t *testing.T) {
	if Third([]int{1, 2, 3}) != 3 {
		t.Error("wrong element")
	}
}
