package bus

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/testkit"
)

// The object-store buckets have quotas (SIZE-05): the defaults on a new
// server, the coordinator's own when it sets them, kept when a runner
// (which sets none) opens the bus; a bucket at its quota refuses a new
// object with ErrBucketFull, naming the flag that raises it, and keeps
// what it holds.
func TestArtifactQuotas(t *testing.T) {
	t.Parallel()
	b, url := openBus(t, Config{})
	for bucket, want := range DefaultArtifactQuotas {
		if got := streamInfo(t, b, "OBJ_"+bucket).Config.MaxBytes; got != want {
			t.Errorf("bucket %s: quota %d; want the default %d", bucket, got, want)
		}
	}
	const quota = 64 << 10
	openMore(t, url, Config{LogsMaxBytes: quota, PatchesMaxBytes: 2 * quota})
	runner := openMore(t, url, Config{})
	for bucket, want := range map[string]int64{protocol.BucketLogs: quota, protocol.BucketPatches: 2 * quota,
		protocol.BucketBundles: DefaultArtifactQuotas[protocol.BucketBundles]} {
		if got := streamInfo(t, runner, "OBJ_"+bucket).Config.MaxBytes; got != want {
			t.Errorf("bucket %s after a runner opened the bus: quota %d; want %d", bucket, got, want)
		}
	}

	ctx := testkit.Context(t, 20*time.Second)
	if _, err := runner.Logs.PutBytes(ctx, "small.log", bytes.Repeat([]byte("a"), quota/4)); err != nil {
		t.Fatalf("a log within the quota: %v", err)
	}
	_, err := runner.Logs.PutBytes(ctx, "big.log", bytes.Repeat([]byte("b"), quota))
	err = ObjectPutError(protocol.BucketLogs, "big.log", err)
	if !errors.Is(err, ErrBucketFull) || !strings.Contains(err.Error(), "--logs-max-bytes") {
		t.Fatalf("a log over the quota: %v; want ErrBucketFull naming --logs-max-bytes", err)
	}
	if got, err := runner.Logs.GetBytes(ctx, "small.log"); err != nil || len(got) != quota/4 {
		t.Fatalf("the log stored before: %d bytes, %v", len(got), err)
	}
}
