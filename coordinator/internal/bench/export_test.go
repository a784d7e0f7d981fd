package bench

// DemoOnProcessOnly has the demo scenario run its second set of runners
// in the process sandbox too, instead of the Docker sandbox: what its
// test checks is the scenario's machinery, not Docker's cost.
func DemoOnProcessOnly(c *Config) { c.demoProcessOnly = true }
