package worker

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/supervisorhq/supervisor/shared/bus"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/testkit"
)

// An agent whose change is over protocol.MaxPatchBytes fails its round
// with the limit's message, and its patch is never uploaded: the patches
// bucket holds no object of the job, while the log says why.
func TestPatchOverLimitNotUploaded(t *testing.T) {
	t.Parallel()
	h := newHarness(t, bus.Config{})
	h.startWorker(Config{})
	job := h.agentJob("big", 1, "make it big")
	// Random bytes do not compress: git's binary patch of them is larger
	// than the file (base85), so 30 MiB make a patch over the 32 MiB limit.
	job.Command = []string{"sh", "-c", "head -c 31457280 /dev/urandom > big.bin; echo wrote big.bin"}
	res := h.run(job)
	if res.Status != protocol.AgentFailed || res.Patch != nil {
		t.Fatalf("status %s, patch %+v; want failed with no patch (error %q)", res.Status, res.Patch, res.Error)
	}
	if !strings.HasPrefix(res.Error, "patch_too_large: the patch is ") || !strings.Contains(res.Error, "over the 33554432-byte limit") {
		t.Errorf("error %q does not say the patch is over the limit", res.Error)
	}
	if logText := string(h.logBytes(res.Log)); !strings.Contains(logText, "patch_too_large") {
		t.Errorf("log does not say the patch was refused:\n%s", logText)
	}
	ctx := testkit.Context(t, 30*time.Second)
	objs, err := h.Bus.Patches.List(ctx)
	if err != nil && !errors.Is(err, jetstream.ErrNoObjectsFound) {
		t.Fatal(err)
	}
	for _, o := range objs {
		if strings.HasPrefix(o.Name, job.WorkflowID+"/") {
			t.Errorf("patch %s (%d bytes) was uploaded", o.Name, o.Size)
		}
	}
}
