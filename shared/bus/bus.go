package bus

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/supervisorhq/supervisor/shared/natsauth"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/protocol/eventlog"
	"github.com/supervisorhq/supervisor/shared/telemetry"
)

// Config sets the JetStream resources' parameters. Zero values take the
// defaults documented on each field.
type Config struct {
	// Replicas of every stream and bucket (default 1; 3 on a cluster).
	Replicas int
	// AckWait is how long a job may go without an ack or heartbeat before
	// JetStream redelivers it (default 30 s). Runners heartbeat at a third
	// of it.
	AckWait time.Duration
	// MaxDeliver caps deliveries of one job; the last failure becomes a
	// dead letter that the coordinator surfaces as a node error (default 5).
	MaxDeliver int
	// DuplicateWindow is how long Nats-Msg-Id de-duplication remembers an
	// id (default 20 min).
	DuplicateWindow time.Duration
	// MaxJobBytes caps one job message (default 1 MiB).
	MaxJobBytes int32
	// EventsMaxAge bounds the event log (default 0: kept forever).
	EventsMaxAge time.Duration
	// EventsMaxBytes caps the event log's size. 0 keeps the cap the stream
	// has (DefaultEventsMaxBytes if it has none yet), so a runner never
	// changes what the coordinator set. A full log refuses appends
	// (ErrEventLogFull) rather than dropping its oldest events.
	EventsMaxBytes int64
	// EventsMutable lets tests purge the event log and delete events from
	// it. Every binary leaves it false: the log then denies both, and once
	// denied a stream cannot allow them again.
	EventsMutable bool
	// ArtifactTTL bounds bundles, patches and logs (default 7 days).
	ArtifactTTL time.Duration
	// BundlesMaxBytes, PatchesMaxBytes and LogsMaxBytes are the quotas of
	// the three object-store buckets. 0 keeps the quota a bucket has (its
	// DefaultArtifactQuotas entry if it has none yet), so a runner never
	// changes what the coordinator set. A full bucket refuses new objects
	// (ObjectPutError explains it) until ArtifactTTL frees room.
	BundlesMaxBytes, PatchesMaxBytes, LogsMaxBytes int64
	// RunnerTTL is how long a runner's entry in the runners bucket
	// outlives its last renewal (default protocol.RunnerTTL). Only tests
	// shorten it.
	RunnerTTL time.Duration
}

func (c Config) withDefaults() Config {
	if c.Replicas <= 0 {
		c.Replicas = 1
	}
	if c.AckWait <= 0 {
		c.AckWait = 30 * time.Second
	}
	if c.MaxDeliver <= 0 {
		c.MaxDeliver = 5
	}
	if c.DuplicateWindow <= 0 {
		c.DuplicateWindow = 20 * time.Minute
	}
	if c.MaxJobBytes <= 0 {
		c.MaxJobBytes = 1 << 20
	}
	if c.ArtifactTTL <= 0 {
		c.ArtifactTTL = 7 * 24 * time.Hour
	}
	if c.RunnerTTL <= 0 {
		c.RunnerTTL = protocol.RunnerTTL
	}
	return c
}

// Bus is a connection to NATS with Supervisor's JetStream resources ready.
type Bus struct {
	NC  *nats.Conn
	JS  jetstream.JetStream
	Cfg Config
	// Bundles, Patches and Logs are the object-store buckets.
	Bundles jetstream.ObjectStore
	Patches jetstream.ObjectStore
	Logs    jetstream.ObjectStore
	// Gates is the fleet's gate registry (protocol.BucketGates), a KV
	// bucket. Attach leaves it nil when the bucket does not exist (a fleet
	// whose coordinator predates the registry).
	Gates jetstream.KeyValue
	// Runners is where workers and gate runners announce themselves
	// (protocol.BucketRunners), a KV bucket whose entries expire
	// Config.RunnerTTL after their last renewal. Attach leaves it nil when
	// the bucket does not exist (a coordinator that predates it).
	Runners jetstream.KeyValue
	log     *slog.Logger
}

// Open connects to NATS at url (retrying until ctx ends) and creates or
// updates every stream and bucket. name identifies the client to the server;
// options are Connect's.
//
// With credentials of a role that does not manage the fleet's resources
// (a worker's or gate runner's: WithNkey), it creates nothing: it waits
// for the coordinator to have created them (AwaitResources).
func Open(ctx context.Context, url, name string, cfg Config, log *slog.Logger, options ...ConnectOption) (*Bus, error) {
	if log == nil {
		log = slog.Default()
	}
	nc, err := Connect(ctx, url, name, log, options...)
	if err != nil {
		return nil, err
	}
	var co connectOptions
	for _, o := range options {
		if o != nil {
			o(&co)
		}
	}
	var b *Bus
	if co.nkeyFile != "" && co.role != natsauth.Coordinator {
		b, err = AwaitResources(ctx, nc, cfg, log)
	} else {
		b, err = New(ctx, nc, cfg, log)
	}
	if err != nil {
		nc.Close()
		return nil, err
	}
	return b, nil
}

// New sets up the resources on an existing connection.
func New(ctx context.Context, nc *nats.Conn, cfg Config, log *slog.Logger) (*Bus, error) {
	if log == nil {
		log = slog.Default()
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("bus: jetstream: %w", err)
	}
	b := &Bus{NC: nc, JS: js, Cfg: cfg.withDefaults(), log: log}
	if err := b.ensure(ctx); err != nil {
		return nil, err
	}
	return b, nil
}

// Attach uses the resources on an existing connection without creating or
// changing any: what a CLI does, so it never reconfigures the fleet.
func Attach(ctx context.Context, nc *nats.Conn, log *slog.Logger) (*Bus, error) {
	if log == nil {
		log = slog.Default()
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("bus: jetstream: %w", err)
	}
	b := &Bus{NC: nc, JS: js, Cfg: Config{}.withDefaults(), log: log}
	for _, bk := range []struct {
		name string
		dst  *jetstream.ObjectStore
	}{{protocol.BucketBundles, &b.Bundles}, {protocol.BucketPatches, &b.Patches}, {protocol.BucketLogs, &b.Logs}} {
		os, err := js.ObjectStore(ctx, bk.name)
		if err != nil {
			return nil, fmt.Errorf("bus: object store %s: %w (is a coordinator running against this NATS?)", bk.name, err)
		}
		*bk.dst = os
	}
	kv, err := js.KeyValue(ctx, protocol.BucketGates)
	switch {
	case err == nil:
		b.Gates = kv
	case errors.Is(err, jetstream.ErrBucketNotFound):
		log.Debug("no gate registry bucket; the coordinator predates it", "bucket", protocol.BucketGates)
	default:
		return nil, fmt.Errorf("bus: key-value bucket %s: %w", protocol.BucketGates, err)
	}
	kv, err = js.KeyValue(ctx, protocol.BucketRunners)
	switch {
	case err == nil:
		b.Runners = kv
	case errors.Is(err, jetstream.ErrBucketNotFound):
		log.Debug("no runners bucket; the coordinator predates it", "bucket", protocol.BucketRunners)
	default:
		return nil, fmt.Errorf("bus: key-value bucket %s: %w", protocol.BucketRunners, err)
	}
	return b, nil
}

// AwaitResources binds the fleet's object stores and buckets on an
// existing connection, as Attach does, waiting with back-off (and saying
// so) until the coordinator has created them; what a runner whose role
// may not create them does. A permission the role lacks ends it at once.
func AwaitResources(ctx context.Context, nc *nats.Conn, cfg Config, log *slog.Logger) (*Bus, error) {
	if log == nil {
		log = slog.Default()
	}
	delay := time.Duration(0)
	for attempt := 1; ; attempt++ {
		b, err := Attach(ctx, nc, log)
		if err == nil && b.Runners != nil {
			b.Cfg = cfg.withDefaults()
			return b, nil
		}
		if d := Denied(nc); d != nil {
			return nil, fmt.Errorf("bus: bind the fleet's buckets: %w", d)
		}
		if err == nil {
			err = fmt.Errorf("key-value bucket %s: %w", protocol.BucketRunners, jetstream.ErrBucketNotFound)
		}
		if !errors.Is(err, jetstream.ErrBucketNotFound) && !errors.Is(err, jetstream.ErrStreamNotFound) && !transientJSErr(err) {
			return nil, err
		}
		delay = DefaultBackoff.Next(delay)
		log.Info("waiting for the coordinator to create the fleet's streams and buckets", "attempt", attempt,
			"retry_in", delay, "err", err)
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("bus: the fleet's streams and buckets: %w (is a coordinator running against this NATS?)", err)
		case <-time.After(delay):
		}
	}
}

// Close drains nothing and closes the connection.
func (b *Bus) Close() { b.NC.Close() }

// retryJS retries a JetStream management call while the server is still
// electing a leader or starting JetStream, which happens right after a
// cluster (re)start.
// A permission the client lacks ends it at once (Denied).
func (b *Bus) retryJS(ctx context.Context, what string, f func(context.Context) error) error {
	delay := time.Duration(0)
	var err error
	for attempt := 0; attempt < 30; attempt++ {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err = f(cctx)
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			break
		}
		if d := Denied(b.NC); d != nil {
			return fmt.Errorf("bus: %s: %w", what, d)
		}
		if !transientJSErr(err) {
			break
		}
		delay = DefaultBackoff.Next(delay)
		select {
		case <-ctx.Done():
		case <-time.After(delay):
		}
	}
	return fmt.Errorf("bus: %s: %w", what, err)
}

func transientJSErr(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.Code == 503 {
		return true // JetStream not ready yet (cluster forming, leader election)
	}
	return errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, jetstream.ErrNoStreamResponse) ||
		errors.Is(err, jetstream.ErrJetStreamNotEnabled) ||
		errors.Is(err, nats.ErrDisconnected)
}

func (b *Bus) ensure(ctx context.Context) error {
	c := b.Cfg
	storage := jetstream.FileStorage
	// JetStream refuses a duplicate window longer than a stream's MaxAge.
	eventDupes := c.DuplicateWindow
	if c.EventsMaxAge > 0 && eventDupes > c.EventsMaxAge {
		eventDupes = c.EventsMaxAge
	}
	streams := []jetstream.StreamConfig{
		{
			Name:        protocol.StreamJobs,
			Description: "Supervisor agent and gate jobs (work queue)",
			Subjects:    []string{protocol.SubjectJobs},
			Retention:   jetstream.WorkQueuePolicy,
			Storage:     storage,
			Replicas:    c.Replicas,
			Duplicates:  c.DuplicateWindow,
			MaxMsgSize:  c.MaxJobBytes,
		},
		{
			Name:        protocol.StreamResults,
			Description: "Supervisor reports from runners to the coordinator",
			Subjects:    []string{protocol.SubjectResults},
			Retention:   jetstream.WorkQueuePolicy,
			Storage:     storage,
			Replicas:    c.Replicas,
			Duplicates:  c.DuplicateWindow,
			MaxMsgSize:  c.MaxJobBytes,
		},
		{
			Name:        protocol.StreamEvents,
			Description: "Supervisor workflow event log",
			Subjects:    []string{protocol.SubjectEvents},
			Retention:   jetstream.LimitsPolicy,
			Storage:     storage,
			Replicas:    c.Replicas,
			Duplicates:  eventDupes,
			MaxAge:      c.EventsMaxAge,
			// Full: appends are refused, no history is dropped.
			MaxBytes:   c.EventsMaxBytes,
			Discard:    jetstream.DiscardNew,
			MaxMsgSize: c.MaxJobBytes,
			// The log is the workflows' truth: no client may rewrite it.
			DenyDelete: !c.EventsMutable,
			DenyPurge:  !c.EventsMutable,
		},
		{
			Name:        protocol.StreamAdvisories,
			Description: "Max-deliveries advisories of Supervisor jobs (dead letters)",
			Subjects:    []string{protocol.SubjectMaxDeliveries},
			Retention:   jetstream.WorkQueuePolicy,
			Storage:     storage,
			Replicas:    c.Replicas,
		},
	}
	for _, sc := range streams {
		if err := b.retryJS(ctx, "create stream "+sc.Name, func(ctx context.Context) error {
			s, err := b.JS.Stream(ctx, sc.Name)
			// Never scale an existing stream down: a runner started with the
			// default of one replica must not shrink a cluster's streams.
			if err == nil && s.CachedInfo().Config.Replicas > sc.Replicas {
				sc.Replicas = s.CachedInfo().Config.Replicas
			}
			if sc.Name == protocol.StreamEvents && sc.MaxBytes <= 0 {
				sc.MaxBytes = DefaultEventsMaxBytes
				if err == nil && s.CachedInfo().Config.MaxBytes > 0 {
					sc.MaxBytes = s.CachedInfo().Config.MaxBytes
				}
			}
			if err == nil && streamHas(s.CachedInfo().Config, sc) {
				// Already so: an update would change nothing, and the
				// server would rewrite the stream's configuration while
				// another runner creates its consumer.
				return nil
			}
			_, err = b.JS.CreateOrUpdateStream(ctx, sc)
			return err
		}); err != nil {
			return streamConfigError(sc.Name, err)
		}
	}
	b.checkEventLog(ctx)
	buckets := []struct {
		name  string
		dst   *jetstream.ObjectStore
		desc  string
		quota int64
	}{
		{protocol.BucketBundles, &b.Bundles, "git bundles of submitted repositories and result branches", c.BundlesMaxBytes},
		{protocol.BucketPatches, &b.Patches, "binary patches produced by agents", c.PatchesMaxBytes},
		{protocol.BucketLogs, &b.Logs, "full agent and gate logs", c.LogsMaxBytes},
	}
	for _, bk := range buckets {
		if err := b.retryJS(ctx, "create object store "+bk.name, func(ctx context.Context) error {
			quota := bk.quota
			if quota <= 0 {
				quota = DefaultArtifactQuotas[bk.name]
				if s, err := b.JS.Stream(ctx, "OBJ_"+bk.name); err == nil && s.CachedInfo().Config.MaxBytes > 0 {
					quota = s.CachedInfo().Config.MaxBytes
				}
			}
			cfg := jetstream.ObjectStoreConfig{
				Bucket:      bk.name,
				Description: bk.desc,
				TTL:         c.ArtifactTTL,
				Storage:     storage,
				Replicas:    c.Replicas,
				MaxBytes:    quota,
			}
			var os jetstream.ObjectStore
			var err error
			if s, serr := b.JS.Stream(ctx, "OBJ_"+bk.name); serr == nil &&
				bucketHas(s.CachedInfo().Config, cfg.Description, cfg.TTL, cfg.Storage, cfg.Replicas, cfg.MaxBytes, 0) {
				os, err = b.JS.ObjectStore(ctx, bk.name) // already so (see streamHas)
			} else {
				os, err = b.JS.CreateOrUpdateObjectStore(ctx, cfg)
			}
			if err != nil {
				return err
			}
			*bk.dst = os
			return nil
		}); err != nil {
			return err
		}
	}
	kvs := []struct {
		cfg jetstream.KeyValueConfig
		dst *jetstream.KeyValue
	}{
		{jetstream.KeyValueConfig{
			Bucket:      protocol.BucketGates,
			Description: "Supervisor's gate registry: gate name -> definition (coordinator gate add)",
			History:     protocol.GatesHistory,
			Storage:     storage,
		}, &b.Gates},
		{jetstream.KeyValueConfig{
			Bucket:      protocol.BucketRunners,
			Description: "Supervisor's runners seen recently: kind.host -> RunnerInfo, renewed by each runner, expiring when not",
			History:     1,
			TTL:         c.RunnerTTL,
			Storage:     jetstream.MemoryStorage,
		}, &b.Runners},
	}
	for _, k := range kvs {
		if err := b.retryJS(ctx, "create key-value bucket "+k.cfg.Bucket, func(ctx context.Context) error {
			cfg := k.cfg
			cfg.Replicas = c.Replicas
			// As for streams: never scale an existing bucket down.
			if s, err := b.JS.Stream(ctx, "KV_"+cfg.Bucket); err == nil && s.CachedInfo().Config.Replicas > cfg.Replicas {
				cfg.Replicas = s.CachedInfo().Config.Replicas
			}
			var kv jetstream.KeyValue
			var err error
			if s, serr := b.JS.Stream(ctx, "KV_"+cfg.Bucket); serr == nil &&
				bucketHas(s.CachedInfo().Config, cfg.Description, cfg.TTL, cfg.Storage, cfg.Replicas, cfg.MaxBytes, int64(cfg.History)) {
				kv, err = b.JS.KeyValue(ctx, cfg.Bucket) // already so (see streamHas)
			} else {
				kv, err = b.JS.CreateOrUpdateKeyValue(ctx, cfg)
			}
			if err != nil {
				return err
			}
			*k.dst = kv
			return nil
		}); err != nil {
			return err
		}
	}
	return nil
}

// JobConsumer creates or updates, and returns, the durable pull consumer of
// jobs of kind for pool. All runners of a pool share it, so each job goes
// to exactly one of them at a time.
func (b *Bus) JobConsumer(ctx context.Context, kind protocol.JobKind, pool string) (jetstream.Consumer, error) {
	var subject string
	switch kind {
	case protocol.KindAgent:
		subject = protocol.AgentJobSubject(pool)
	case protocol.KindGate:
		subject = protocol.GateJobSubject(pool)
	default:
		return nil, fmt.Errorf("bus: unknown job kind %q", kind)
	}
	name := protocol.ConsumerName(kind, pool)
	var cons jetstream.Consumer
	err := b.retryJS(ctx, "create consumer "+name, func(ctx context.Context) error {
		var err error
		cons, err = b.JS.CreateOrUpdateConsumer(ctx, protocol.StreamJobs, jetstream.ConsumerConfig{
			Durable:       name,
			Description:   fmt.Sprintf("%s jobs of pool %s", kind, pool),
			FilterSubject: subject,
			AckPolicy:     jetstream.AckExplicitPolicy,
			AckWait:       b.Cfg.AckWait,
			MaxDeliver:    b.Cfg.MaxDeliver,
			MaxAckPending: 10000,
			MaxWaiting:    4096,
		})
		return err
	})
	return cons, err
}

// PublishJob publishes a job with its id as Nats-Msg-Id, so publishing the
// same job twice (for instance after a coordinator restart) is harmless.
// ctx's span context, if any, travels in the message's traceparent header.
func (b *Bus) PublishJob(ctx context.Context, kind protocol.JobKind, pool, jobID string, payload []byte) error {
	msg, err := b.jobMsg(ctx, kind, pool, jobID, payload)
	if err != nil {
		return err
	}
	if _, err := b.JS.PublishMsg(ctx, msg, jetstream.WithMsgID(jobID)); err != nil {
		return fmt.Errorf("bus: publish job %s on %s: %w", jobID, msg.Subject, err)
	}
	return nil
}

// PublishJobAsync is PublishJob without waiting for the stream's
// acknowledgement: the returned future says whether the job was stored.
// The coordinator publishes a decision's jobs this way and waits for all
// of them together.
func (b *Bus) PublishJobAsync(ctx context.Context, kind protocol.JobKind, pool, jobID string, payload []byte) (jetstream.PubAckFuture, error) {
	msg, err := b.jobMsg(ctx, kind, pool, jobID, payload)
	if err != nil {
		return nil, err
	}
	f, err := b.JS.PublishMsgAsync(msg, jetstream.WithMsgID(jobID))
	if err != nil {
		return nil, fmt.Errorf("bus: publish job %s on %s: %w", jobID, msg.Subject, err)
	}
	return f, nil
}

// jobMsg is the message of a job, with its kind and ctx's span context in
// its headers.
func (b *Bus) jobMsg(ctx context.Context, kind protocol.JobKind, pool, jobID string, payload []byte) (*nats.Msg, error) {
	subject := protocol.AgentJobSubject(pool)
	if kind == protocol.KindGate {
		subject = protocol.GateJobSubject(pool)
	}
	if len(payload) > int(b.Cfg.MaxJobBytes) {
		return nil, fmt.Errorf("bus: job %s is %d bytes, over the %d-byte limit", jobID, len(payload), b.Cfg.MaxJobBytes)
	}
	msg := &nats.Msg{Subject: subject, Data: payload, Header: nats.Header{}}
	msg.Header.Set(protocol.HeaderKind, string(kind))
	// The dispatch's span context: the runner's job span is its child.
	telemetry.Inject(ctx, msg.Header)
	return msg, nil
}

// PublishReport sends a report to the coordinator. msgID makes re-sending
// the same report (after a crash between publish and ack) harmless. ctx's
// span context, if any, travels in the message's traceparent header.
func (b *Bus) PublishReport(ctx context.Context, r *protocol.Report, msgID string) error {
	if err := r.Validate(); err != nil {
		return err
	}
	data, err := protocol.Encode(r)
	if err != nil {
		return err
	}
	subject := protocol.ResultSubject(r.WorkflowID())
	msg := &nats.Msg{Subject: subject, Data: data, Header: nats.Header{}}
	telemetry.Inject(ctx, msg.Header)
	_, err = b.JS.PublishMsg(ctx, msg, jetstream.WithMsgID(msgID))
	if err != nil {
		return fmt.Errorf("bus: publish %s report %s: %w", r.Type, msgID, err)
	}
	return nil
}

// ErrEventLogMoved is returned by AppendEvent when the workflow's log
// no longer ends where the appender expected: another writer appended.
var ErrEventLogMoved = errors.New("event log moved: another writer appended to it")

// ErrEventLogFull is returned by AppendEvent when the event log holds its
// max bytes: nothing more is appended until an operator raises the cap
// (or EventsMaxAge expires old events).
var ErrEventLogFull = errors.New("event log full")

// ErrCodeClusterNotAvailable is JetStream's "system temporarily
// unavailable" (nats-server's JSClusterNotAvailErr): a cluster with no meta
// leader yet, which waiting may clear.
const ErrCodeClusterNotAvailable jetstream.ErrorCode = 10008

// errCodeStreamStoreFailed is JetStream's error code for a message a
// stream could not store (a DiscardNew stream at its limits among others).
const errCodeStreamStoreFailed jetstream.ErrorCode = 10077

// DefaultEventsMaxBytes is the event log's cap when Config.EventsMaxBytes
// is not set and the stream has none yet (1 GiB).
const DefaultEventsMaxBytes = 1 << 30

// DefaultArtifactQuotas are the object-store buckets' quotas when
// Config sets none and a bucket has none yet: 2 GiB of bundles, 1 GiB of
// patches and 1 GiB of logs. JetStream reserves a bucket's quota on its
// servers' disks when it is created, so they are kept modest; the
// coordinator's --bundles-max-bytes, --patches-max-bytes and
// --logs-max-bytes change them.
var DefaultArtifactQuotas = map[string]int64{
	protocol.BucketBundles: 2 << 30,
	protocol.BucketPatches: 1 << 30,
	protocol.BucketLogs:    1 << 30,
}

// ErrBucketFull is returned (wrapped, by ObjectPutError) for an object a
// bucket at its quota refused.
var ErrBucketFull = errors.New("object store bucket full")

// ObjectPutError explains a failed put of object name into bucket: a
// bucket at its quota is ErrBucketFull, naming the coordinator's flag
// that raises it.
func ObjectPutError(bucket, name string, err error) error {
	if err != nil && strings.Contains(err.Error(), "maximum bytes exceeded") {
		return fmt.Errorf("bus: put %s in %s: %w: the bucket is at its quota; old objects expire after the "+
			"coordinator's --artifact-ttl, or raise its --%s-max-bytes: %v", name, bucket, ErrBucketFull,
			strings.TrimPrefix(bucket, "sup-"), err)
	}
	return fmt.Errorf("bus: put %s in %s: %w", name, bucket, err)
}

// AppendOption configures AppendEvent.
type AppendOption func(*appendOptions)

type appendOptions struct {
	msgID      string
	msgIDs     []string
	expectLast *uint64
}

// WithMsgID de-duplicates a re-append of the same event.
func WithMsgID(id string) AppendOption {
	return func(o *appendOptions) { o.msgID = id }
}

// WithMsgIDs de-duplicates a re-append of the same events by AppendEvents:
// ids[i] names events[i], and the message's id is made of those of the
// events it holds (the one id of a single event, as WithMsgID).
func WithMsgIDs(ids []string) AppendOption {
	return func(o *appendOptions) { o.msgIDs = ids }
}

// batchMsgID is the de-duplication id of a message holding the events
// ids name: the id itself for one, a digest of them all for several.
func batchMsgID(ids []string) string {
	if len(ids) == 1 {
		return ids[0]
	}
	for _, id := range ids {
		if id == "" {
			return "" // an event without one: the message has none
		}
	}
	h := sha256.Sum256([]byte(strings.Join(ids, "\n")))
	return "batch-" + hex.EncodeToString(h[:16])
}

// ExpectLast fences the append: it succeeds only if seq is the sequence of
// the workflow's last event (0: the workflow has none). A writer that has
// folded its workflow's log up to seq thus never appends on a state that
// another writer has changed.
func ExpectLast(seq uint64) AppendOption {
	return func(o *appendOptions) { o.expectLast = &seq }
}

// AppendEvent appends an event to its workflow's log and returns its
// sequence; duplicate is true when a de-duplicated re-append found the
// event already there, at that sequence. A fenced append that finds the log
// moved fails with ErrEventLogMoved.
func (b *Bus) AppendEvent(ctx context.Context, e eventlog.Event, opts ...AppendOption) (seq uint64, duplicate bool, err error) {
	data, err := eventlog.Encode(e)
	if err != nil {
		return 0, false, err
	}
	return b.appendMessage(ctx, e.WorkflowID, string(e.Type())+" event", 1, data, opts)
}

// MaxBatchBytes bounds the encoding of the events AppendEvents puts in
// one log message, well under a NATS server's default maximum payload
// (1 MiB). A server configured with a smaller one lowers it to half of
// that.
const MaxBatchBytes = 256 << 10

// batchLimit is the size AppendEvents fills a message up to: MaxBatchBytes,
// or half the server's maximum payload if that is smaller.
func (b *Bus) batchLimit() int {
	limit := MaxBatchBytes
	if nc := b.JS.Conn(); nc != nil {
		if mp := int(nc.MaxPayload()); mp > 0 && mp/2 < limit {
			limit = mp / 2
		}
	}
	return limit
}

// AppendEvents appends events of one workflow, in order, as one log
// message (eventlog.JoinEncoded): all of them or none are in the log, at
// one sequence. It takes the longest prefix of events that fits in
// batchLimit and eventlog.MaxBatchEvents (at least one event) and returns
// how many it took, n; the caller appends the rest next, fenced on seq.
// The options are AppendEvent's; WithMsgIDs names each event, and the
// message is de-duplicated by the ids of the n events it holds.
func (b *Bus) AppendEvents(ctx context.Context, events []eventlog.Event, opts ...AppendOption) (seq uint64, n int, duplicate bool, err error) {
	if len(events) == 0 {
		return 0, 0, false, fmt.Errorf("bus: append events: %w", eventlog.ErrEmptyBatch)
	}
	wf := events[0].WorkflowID
	encoded := make([][]byte, 0, min(len(events), eventlog.MaxBatchEvents))
	size, limit := 0, b.batchLimit()
	for _, e := range events[:min(len(events), eventlog.MaxBatchEvents)] {
		if e.WorkflowID != wf {
			return 0, 0, false, fmt.Errorf("bus: append events: a %s event of %s among events of %s", e.Type(), e.WorkflowID, wf)
		}
		data, err := eventlog.Encode(e)
		if err != nil {
			return 0, 0, false, err
		}
		if len(encoded) > 0 && size+len(data)+1 > limit {
			break
		}
		encoded, size = append(encoded, data), size+len(data)+1
	}
	data, err := eventlog.JoinEncoded(encoded)
	if err != nil {
		return 0, 0, false, err
	}
	what := string(events[0].Type()) + " event"
	if len(encoded) > 1 {
		what = fmt.Sprintf("%d events", len(encoded))
	}
	seq, duplicate, err = b.appendMessage(ctx, wf, what, len(encoded), data, opts)
	if err != nil {
		return 0, 0, false, err
	}
	return seq, len(encoded), duplicate, nil
}

// appendMessage publishes one encoded log message of workflow wf, holding
// n events; what names it in errors.
func (b *Bus) appendMessage(ctx context.Context, wf, what string, n int, data []byte, opts []AppendOption) (seq uint64, duplicate bool, err error) {
	var o appendOptions
	for _, opt := range opts {
		opt(&o)
	}
	if o.msgIDs != nil {
		o.msgID = batchMsgID(o.msgIDs[:min(n, len(o.msgIDs))])
	}
	var popts []jetstream.PublishOpt
	if o.msgID != "" {
		popts = append(popts, jetstream.WithMsgID(o.msgID))
	}
	if o.expectLast != nil {
		popts = append(popts, jetstream.WithExpectLastSequencePerSubject(*o.expectLast))
	}
	ack, err := b.JS.Publish(ctx, protocol.EventSubject(wf), data, popts...)
	if err != nil {
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
			apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant) {
			return 0, false, fmt.Errorf("bus: append %s for %s: %w (%v)", what, wf, ErrEventLogMoved, err)
		}
		if errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeStreamStoreFailed &&
			strings.Contains(apiErr.Description, "maximum bytes exceeded") {
			return 0, false, fmt.Errorf("bus: append %s for %s: %w: stream %s is at its max bytes "+
				"(raise the coordinator's --events-max-bytes): %v",
				what, wf, ErrEventLogFull, protocol.StreamEvents, err)
		}
		return 0, false, fmt.Errorf("bus: append %s for %s: %w", what, wf, err)
	}
	return ack.Sequence, ack.Duplicate, nil
}

// streamHas reports whether the existing configuration have already is
// what want asks for, in the server's form of a setting left at zero (one
// replica, no byte or message size limit, a two-minute duplicate window),
// so that an update would change nothing.
func streamHas(have, want jetstream.StreamConfig) bool {
	orDefault := func(v, def int64) int64 {
		if v == 0 {
			return def
		}
		return v
	}
	return have.Description == want.Description && slices.Equal(have.Subjects, want.Subjects) &&
		have.Retention == want.Retention && have.Storage == want.Storage && have.Discard == want.Discard &&
		have.DenyDelete == want.DenyDelete && have.DenyPurge == want.DenyPurge && have.MaxAge == want.MaxAge &&
		orDefault(int64(want.Replicas), 1) == int64(have.Replicas) &&
		orDefault(int64(want.Duplicates), int64(2*time.Minute)) == int64(have.Duplicates) &&
		unlimited(want.MaxBytes) == unlimited(have.MaxBytes) &&
		unlimited(int64(want.MaxMsgSize)) == unlimited(int64(have.MaxMsgSize))
}

// unlimited gives a limit in one form: 0 and any negative value (the
// server's -1) both mean none.
func unlimited(v int64) int64 {
	if v <= 0 {
		return -1
	}
	return v
}

// bucketHas is streamHas for the stream of an object store or key-value
// bucket: its description, age limit (TTL), storage, replicas, byte limit
// and, for a key-value bucket, history (0 for an object store).
func bucketHas(have jetstream.StreamConfig, desc string, ttl time.Duration, storage jetstream.StorageType,
	replicas int, maxBytes, history int64) bool {
	return have.Description == desc && have.MaxAge == ttl && have.Storage == storage &&
		max(replicas, 1) == have.Replicas && unlimited(maxBytes) == unlimited(have.MaxBytes) &&
		(history == 0 || have.MaxMsgsPerSubject == history)
}

// streamConfigError explains a stream the server would not create or
// update: most often one whose existing configuration this build may not
// change (a log that denies deletes, made by a newer build, cannot allow
// them again).
func streamConfigError(name string, err error) error {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && strings.Contains(apiErr.Description, "can not") {
		return fmt.Errorf("bus: stream %s exists with a configuration this build may not change (%w); "+
			"run the same Supervisor version everywhere, or change the stream with the nats CLI", name, err)
	}
	return err
}

// eventLogWarnRatio is how full the event log may get before Open warns.
const eventLogWarnRatio = 0.8

// checkEventLog says loudly, at start, when the event log is full or
// nearly so: appends are refused once it holds its max bytes.
func (b *Bus) checkEventLog(ctx context.Context) {
	s, err := b.JS.Stream(ctx, protocol.StreamEvents)
	if err != nil {
		return
	}
	info := s.CachedInfo()
	max := info.Config.MaxBytes
	if max <= 0 {
		return
	}
	used := info.State.Bytes
	switch {
	case used >= uint64(max):
		b.log.Error("the event log is full: no workflow can be submitted or advance until its cap is raised "+
			"(coordinator --events-max-bytes)",
			"stream", protocol.StreamEvents, "bytes", used, "max_bytes", max)
	case float64(used) >= eventLogWarnRatio*float64(max):
		b.log.Warn("the event log is nearly full; at its cap appends are refused",
			"stream", protocol.StreamEvents, "bytes", used, "max_bytes", max)
	}
}
