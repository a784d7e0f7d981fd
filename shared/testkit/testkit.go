// Package testkit is for tests only: the helpers the tests of every module
// share. It starts the real servers tests run against (an embedded
// nats-server with JetStream, a redis-server process), runs git in
// temporary repositories, writes and reads files, bounds a test with a
// context, waits for a condition or a channel, and gives a clock the test
// moves by hand, a logger writing to the test's log, a buffer safe for
// concurrent writers and a check of lists of validation problems.
//
// Under CI=true a missing real dependency (redis-server, the Docker
// engine) fails the test instead of skipping it (see Missing).
//
// Helpers that serve one concern live beside it: statetest (the state
// store conformance suite), jobruntest (the job runners' fleet),
// sandboxtest (the Docker engine and the probe image).
package testkit
