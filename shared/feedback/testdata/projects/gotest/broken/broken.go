// Package broken does not compile.
package broken

func Double(x int) int {
	return x * y
}
