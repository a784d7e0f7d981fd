// Package e2e holds Supervisor's multi-process end-to-end tests. Everything
// is real: TestMain builds the coordinator, worker and gaterunner binaries,
// the scripted supervisor-test-agent and a nats-server (from its Go module)
// into a temporary directory; every test starts its own nats-server process
// with JetStream, a Redis (testkit.Redis: a redis-server process of its
// own, or a private database of the server SUPERVISOR_TEST_REDIS_URL names),
// `coordinator serve`, workers and gate runners as separate OS processes, and
// drives them through the coordinator's command line against sample git
// repositories. Each process logs to its own file, dumped when a test fails.
//
// Run them from the repository root (go.work ties the modules together):
//
//	go test ./coordinator/e2e/ -count=1
//
// `make test-e2e` does the same. They need git and redis-server; a missing
// redis-server skips them, except under CI=true where it fails them. -short
// skips them altogether.
package e2e
