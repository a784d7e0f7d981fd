// Package calc has two deliberate bugs for the feedback fixtures.
package calc

// Add returns a+b, but is off by one.
func Add(a, b int) int { return a + b + 1 }

// Div returns a/b and reports division by zero.
func Div(a, b int) (int, bool) {
	if b == 0 {
		return 0, true // wrong: should report failure
	}
	return a / b, true
}
