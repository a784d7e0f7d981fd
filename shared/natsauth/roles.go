// Package natsauth is the one place where Supervisor's NATS roles and their
// permissions are defined: which subjects each role (coordinator, worker,
// gate runner, cli, operator) may publish and subscribe to, and why. From
// that table it renders the nats-server authorization block (Config), the
// Markdown table of docs/security.md (MarkdownTable), and, through
// shared/embedded, the embedded server's users. It also reads the nkey
// files `coordinator creds init` writes (ReadKeyFile).
package natsauth

import (
	"fmt"
	"sort"

	"github.com/supervisorhq/supervisor/shared/protocol"
)

// Role is a NATS identity of the fleet: one nkey user each.
type Role string

// The roles. A user of the fleet is given cli or operator credentials.
const (
	Coordinator Role = "coordinator"
	Worker      Role = "worker"
	GateRunner  Role = "gaterunner"
	CLI         Role = "cli"
	Operator    Role = "operator"
)

// Roles lists every role, in the order files and tables list them.
func Roles() []Role { return []Role{Coordinator, Worker, GateRunner, CLI, Operator} }

// Valid reports whether r is one of Roles.
func (r Role) Valid() bool {
	for _, x := range Roles() {
		if x == r {
			return true
		}
	}
	return false
}

// Grant is a set of subjects a role may publish to and/or subscribe to,
// with the reason it needs them.
type Grant struct {
	Publish   []string
	Subscribe []string
	Why       string
}

// Spec is a role's permissions.
type Spec struct {
	Role Role
	// Summary says who holds the role.
	Summary string
	Grants  []Grant
	// AllowResponses lets the role answer the requests it receives (one
	// reply each, to whatever reply subject they carry): the coordinator's
	// API service replies to every client's inbox this way.
	AllowResponses bool
}

// InboxPrefix is the reply-subject prefix of a client whose nkey's public
// key is pub: each identity's replies arrive under a prefix only it may
// subscribe to, so no role reads another's replies (API answers, log
// tails, JetStream responses).
func InboxPrefix(pub string) string { return "_INBOX_" + pub }

// Publish is every subject the role may publish to, sorted and without
// duplicates.
func (s Spec) Publish() []string { return s.collect(func(g Grant) []string { return g.Publish }) }

// Subscribe is every subject the role holding public key pub may subscribe
// to, its own inbox prefix included, sorted and without duplicates.
func (s Spec) Subscribe(pub string) []string {
	return append(s.collect(func(g Grant) []string { return g.Subscribe }), InboxPrefix(pub)+".>")
}

func (s Spec) collect(f func(Grant) []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, g := range s.Grants {
		for _, subj := range f(g) {
			if !seen[subj] {
				seen[subj] = true
				out = append(out, subj)
			}
		}
	}
	sort.Strings(out)
	return out
}

// SpecOf returns role's permissions.
func SpecOf(role Role) (Spec, error) {
	for _, s := range specs() {
		if s.Role == role {
			return s, nil
		}
	}
	return Spec{}, fmt.Errorf("natsauth: unknown role %q (want one of %v)", role, Roles())
}

// API endpoints by who may call them. Every other endpoint is refused to
// both (the coordinator role holds all of sup.api.>).
var (
	// UserAPI is what any user (cli) may ask: read the fleet's state,
	// submit work, cancel it.
	UserAPI = []string{protocol.APISubmit, protocol.APIStatus, protocol.APIList, protocol.APILogs,
		protocol.APIShow, protocol.APIInbox, protocol.APIGateList, protocol.APIFleet, protocol.APIBreakers,
		protocol.APICancel}
	// OperatorAPI is what only an operator may ask on top of UserAPI:
	// decisions on escalated nodes, merges, breaker resets, the fleet-wide
	// pause, gate registry changes and gate re-runs.
	OperatorAPI = []string{protocol.APIApprove, protocol.APIReject, protocol.APIRetry, protocol.APIResume,
		protocol.APIMerge, protocol.APIBreakerReset, protocol.APIGateAdd, protocol.APIGateUpdate,
		protocol.APIGateRemove, protocol.APIGateRerun}
)

func apiSubjects(endpoints []string) []string {
	out := make([]string, len(endpoints))
	for i, e := range endpoints {
		out[i] = protocol.APISubject(e)
	}
	return out
}

// Streams and buckets, named as JetStream names their streams.
const (
	objStream = "OBJ_"
	kvStream  = "KV_"
)

// streamRead is what reading a bucket's stream needs: its info (binding
// the bucket), direct gets of the last message on a subject, message gets,
// and ordered consumers with their flow control.
func streamRead(stream string) []string {
	return []string{
		"$JS.API.STREAM.INFO." + stream,
		"$JS.API.DIRECT.GET." + stream + ".>",
		"$JS.API.STREAM.MSG.GET." + stream,
		"$JS.API.CONSUMER.CREATE." + stream + ".>",
		"$JS.API.CONSUMER.DELETE." + stream + ".>",
		"$JS.API.CONSUMER.INFO." + stream + ".>",
		"$JS.FC." + stream + ".>",
	}
}

// objectRead is what reading objects of bucket needs: its stream's info
// (binding the store), an object's metadata (a direct get of the last
// message on its meta subject) and its chunks (an ordered consumer).
func objectRead(bucket string) []string { return streamRead(objStream + bucket) }

// objectWrite is what putting objects into bucket needs on top of
// objectRead: its chunk and metadata subjects.
func objectWrite(bucket string) []string {
	return append(objectRead(bucket), "$O."+bucket+".>")
}

// kvReadWrite is what using KV bucket needs: binding it, reading keys
// (direct gets), writing and deleting them, and watching them.
func kvReadWrite(bucket string) []string {
	return append(streamRead(kvStream+bucket), "$KV."+bucket+".>")
}

// objectBind is binding an object store without reading or writing it.
func objectBind(bucket string) []string { return []string{"$JS.API.STREAM.INFO." + objStream + bucket} }

// kvBind is binding a KV bucket without reading or writing it.
func kvBind(bucket string) []string { return []string{"$JS.API.STREAM.INFO." + kvStream + bucket} }

// jobConsumer is what pulling jobs of one kind (subject prefix
// sup.job.<kind>) needs: creating or updating its pools' durable
// consumers, whose filter JetStream checks against the subject the request
// names, pulling from them and acknowledging their messages.
func jobConsumer(kind string) []string {
	return []string{
		"$JS.API.CONSUMER.CREATE." + protocol.StreamJobs + ".*.sup.job." + kind + ".*",
		"$JS.API.CONSUMER.INFO." + protocol.StreamJobs + ".*",
		"$JS.API.CONSUMER.MSG.NEXT." + protocol.StreamJobs + ".*",
		"$JS.ACK." + protocol.StreamJobs + ".>",
	}
}

func concat(lists ...[]string) []string {
	var out []string
	for _, l := range lists {
		out = append(out, l...)
	}
	return out
}

// runnerGrants are what workers and gate runners both need beyond their
// jobs.
func runnerGrants() []Grant {
	return []Grant{
		{Publish: []string{protocol.SubjectResults}, Why: "publish their reports (started, heartbeat, result) to the coordinator"},
		{Publish: concat(objectRead(protocol.BucketBundles), objectWrite(protocol.BucketLogs)),
			Why: "read submitted repositories' bundles; store full logs"},
		{Publish: concat(kvReadWrite(protocol.BucketState), kvReadWrite(protocol.BucketRunners), kvBind(protocol.BucketGates)),
			Why: "the state bucket (leases, cache, breakers) when no Redis is configured; announce themselves in " +
				protocol.BucketRunners},
		{Subscribe: []string{protocol.SubjectCancelAll}, Why: "hear cancellations, to stop a cancelled workflow's jobs early"},
	}
}

// clientGrants are what the cli role needs beside its API requests.
func clientGrants() []Grant {
	ev := protocol.StreamEvents
	return []Grant{
		{Publish: apiSubjects(UserAPI), Why: "the requests any user may make: submit, status, list, logs, show, inbox, gate-list, fleet, breakers, cancel"},
		{Publish: concat(objectWrite(protocol.BucketBundles), objectRead(protocol.BucketLogs), objectBind(protocol.BucketPatches),
			kvBind(protocol.BucketGates), kvBind(protocol.BucketRunners)),
			Why: "upload the submitted repository's bundle, fetch result bundles and stored logs (binding the other buckets, reading none)"},
		{Publish: []string{"$JS.API.STREAM.INFO." + ev, "$JS.API.CONSUMER.CREATE." + ev + ".>", "$JS.API.CONSUMER.MSG.NEXT." + ev + ".*",
			"$JS.API.CONSUMER.DELETE." + ev + ".*", "$JS.API.CONSUMER.INFO." + ev + ".*"},
			Why: "watch a workflow's events (an ordered consumer of " + ev + ", read only)"},
		{Subscribe: []string{"sup.log.>"}, Why: "follow agents' live log lines (logs -f)"},
	}
}

func specs() []Spec {
	runner := func(role Role, kind, summary, why string) Spec {
		return Spec{Role: role, Summary: summary,
			Grants: append([]Grant{{Publish: jobConsumer(kind), Why: why}}, runnerGrants()...)}
	}
	worker := runner(Worker, "agent", "every worker",
		"pull agent jobs of their pools through the pools' durable consumers, acknowledge and heartbeat them")
	worker.Grants = append(worker.Grants, Grant{Publish: []string{"sup.log.>"}, Why: "publish agents' live log lines"},
		Grant{Publish: objectWrite(protocol.BucketPatches), Why: "store the patches agents produce"})
	gate := runner(GateRunner, "gate", "every gate runner",
		"pull gate jobs of their pools through the pools' durable consumers, acknowledge and heartbeat them")
	gate.Grants = append(gate.Grants, Grant{Publish: objectRead(protocol.BucketPatches), Why: "read the patches whose gates they run"})
	cli := Spec{Role: CLI, Summary: "a user of the fleet (coordinator submit, status, watch, logs, cancel, inbox, show …)",
		Grants: clientGrants()}
	op := Spec{Role: Operator, Summary: "an operator: a user who may also decide, merge and change the fleet",
		Grants: append(clientGrants(), Grant{Publish: apiSubjects(OperatorAPI),
			Why: "approve, reject, retry, resume, merge, breaker-reset, gate-add, gate-update, gate-remove, gate-rerun"})}
	coord := Spec{Role: Coordinator, Summary: "the coordinator service (serve, and dev's embedded fleet)", AllowResponses: true,
		Grants: []Grant{
			{Publish: []string{"$JS.API.>"}, Why: "create and update every stream, consumer, KV bucket and object store; read them"},
			{Publish: []string{"$JS.ACK.>", "$JS.FC.>"}, Why: "acknowledge reports, dead-letter advisories and events it consumes"},
			{Publish: []string{"$KV.>", "$O.>"}, Why: "write the state, gate registry and runners buckets; store result bundles"},
			{Publish: []string{protocol.SubjectJobs, protocol.SubjectEvents, "sup.ctl.>"},
				Why: "publish jobs, append to the event log, announce cancellations"},
			{Publish: []string{protocol.APIPrefix + ".>"}, Subscribe: []string{protocol.APIPrefix + ".>", "$SRV.>"},
				Why: "serve the API (and its micro-service discovery); its own health check calls it"},
			{Subscribe: []string{"sup.log.>"}, Why: "the dashboard follows agents' live log lines"},
		}}
	return []Spec{coord, worker, gate, cli, op}
}
