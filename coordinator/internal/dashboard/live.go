package dashboard

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/supervisorhq/supervisor/shared/protocol"
)

// live streams a node's live log lines (protocol.LogSubject, published by
// the worker while the agent runs) as server-sent events: one "log" event
// per line, its data the protocol.LogLine as JSON. Nothing is replayed:
// the stored logs are on the node's page.
func (s *Server) live(w http.ResponseWriter, r *http.Request) {
	wf, node, err := ids(r, true)
	if err != nil {
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	}
	flusher, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming is not supported here", http.StatusInternalServerError)
		return
	}
	msgs := make(chan *nats.Msg, 256)
	sub, err := s.nc.ChanSubscribe(protocol.LogSubject(wf, node), msgs)
	if err != nil {
		http.Error(w, fmt.Sprintf("subscribing to the live log: %v", err), http.StatusBadGateway)
		return
	}
	defer func() { _ = sub.Unsubscribe() }()
	// The subscription must reach the server before the client is told
	// the stream is open, or the first lines could be missed.
	if err := s.nc.FlushTimeout(5 * time.Second); err != nil {
		http.Error(w, fmt.Sprintf("subscribing to the live log: %v", err), http.StatusBadGateway)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	fmt.Fprint(w, "retry: 3000\nevent: open\ndata: {}\n\n")
	flusher.Flush()
	keepalive := time.NewTicker(15 * time.Second)
	defer keepalive.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-keepalive.C:
			fmt.Fprint(w, ": keepalive\n\n")
		case m := <-msgs:
			var line protocol.LogLine
			if json.Unmarshal(m.Data, &line) != nil {
				continue
			}
			data, _ := json.Marshal(line)
			fmt.Fprintf(w, "event: log\ndata: %s\n\n", data)
		}
		flusher.Flush()
	}
}
