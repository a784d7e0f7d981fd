package bus

import (
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/testkit"
)

// Open creates the gate registry's KV bucket (keeping a few revisions of
// each gate), opening again keeps its content, and Attach opens it.
func TestOpenCreatesGateRegistry(t *testing.T) {
	t.Parallel()
	b, url := openBus(t, Config{})
	ctx := testkit.Context(t, 10*time.Second)
	if b.Gates == nil {
		t.Fatal("Bus.Gates not set")
	}
	st, err := b.Gates.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Bucket() != protocol.BucketGates || st.History() != protocol.GatesHistory {
		t.Errorf("gate registry bucket %s, history %d; want %s, %d", st.Bucket(), st.History(), protocol.BucketGates, protocol.GatesHistory)
	}
	if _, err := b.Gates.Put(ctx, "vet", []byte(`{"name":"vet","command":["go","vet"]}`)); err != nil {
		t.Fatal(err)
	}
	b2 := openMore(t, url, Config{})
	if e, err := b2.Gates.Get(ctx, "vet"); err != nil || e.Revision() != 1 {
		t.Errorf("vet after reopening: %v, %v", e, err)
	}
	a, err := Attach(ctx, b.NC, quiet)
	if err != nil || a.Gates == nil {
		t.Fatalf("Attach: %v, gates %v", err, a)
	}
	if e, err := a.Gates.Get(ctx, "vet"); err != nil || string(e.Value()) == "" {
		t.Errorf("vet through Attach: %v", err)
	}
}
