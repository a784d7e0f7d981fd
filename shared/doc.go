// Package shared is the library the coordinator, worker and gaterunner binaries
// have in common. Its sub-packages provide the wire protocol (protocol), the
// JetStream set-up and job consumption (bus), the state backends (state), the
// sandbox in which agents and gates run (sandbox), workspace materialization
// (workspace) and the helpers tests share (testkit).
package shared
