package scoretable

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	pb "github.com/hrl-scheduler/hrl-scheduler/scheduler-plugin/pkg/proto/embeddingsv1"
)

// MaxMessageBytes is the largest table accepted (policy.cache.MAX_MESSAGE_BYTES).
const MaxMessageBytes = 64 << 20

// WatchEvents receives what a Watcher sees, for metrics (every method may be called from the watch goroutine).
type WatchEvents interface {
	Connected(bool)
	Table(t *Table, decode time.Duration)
	Heartbeat()
	Error(kind string) // "stream" (the stream broke or could not open), "invalid" (a table refused)
}

type noEvents struct{}

func (noEvents) Connected(bool)              {}
func (noEvents) Table(*Table, time.Duration) {}
func (noEvents) Heartbeat()                  {}
func (noEvents) Error(string)                {}

// Watcher keeps the newest table of one embedding cache (WatchScoreTable, a server stream): Current never blocks
// and never touches the network. A broken stream is reopened with jittered exponential backoff; the last table
// stays current meanwhile (it ages, and the plugin stops using it past its bound).
type Watcher struct {
	Address    string
	Name       string        // sent as the watcher's name
	MinBackoff time.Duration // default 200ms
	MaxBackoff time.Duration // default 10s
	Events     WatchEvents

	current atomic.Pointer[Table]
	conn    *grpc.ClientConn
}

// NewWatcher builds a watcher of the cache at address (host:port); Run starts it. The channel connects lazily.
func NewWatcher(address, name string, events WatchEvents) (*Watcher, error) {
	if events == nil {
		events = noEvents{}
	}
	conn, err := grpc.NewClient(address,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxMessageBytes)),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
	)
	if err != nil {
		return nil, fmt.Errorf("cacheAddress %q: %w", address, err)
	}
	return &Watcher{Address: address, Name: name, MinBackoff: 200 * time.Millisecond, MaxBackoff: 10 * time.Second,
		Events: events, conn: conn}, nil
}

// Current is the newest table received, nil before the first.
func (w *Watcher) Current() *Table { return w.current.Load() }

// Run watches until ctx ends, then closes the connection.
func (w *Watcher) Run(ctx context.Context) {
	defer w.conn.Close()
	client := pb.NewEmbeddingCacheClient(w.conn)
	backoff := w.MinBackoff
	failing := false
	for ctx.Err() == nil {
		got, err := w.watchOnce(ctx, client)
		w.Events.Connected(false)
		if ctx.Err() != nil {
			return
		}
		if got {
			backoff = w.MinBackoff
		}
		if !failing || got {
			klog.InfoS("hrl-score: score-table watch ended, reopening", "cache", w.Address, "err", err)
		}
		failing = !got
		w.Events.Error("stream")
		sleep := backoff/2 + rand.N(backoff/2+1)
		select {
		case <-ctx.Done():
			return
		case <-time.After(sleep):
		}
		backoff = min(2*backoff, w.MaxBackoff)
	}
}

// watchOnce runs one stream until it breaks; got: it delivered at least one event.
func (w *Watcher) watchOnce(ctx context.Context, client pb.EmbeddingCacheClient) (got bool, err error) {
	var known uint64
	if t := w.current.Load(); t != nil {
		known = t.Generation
	}
	stream, err := client.WatchScoreTable(ctx, &pb.WatchScoreTableRequest{KnownGeneration: known, Watcher: w.Name})
	if err != nil {
		return false, err
	}
	for {
		ev, err := stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) || status.Code(err) == codes.Canceled {
				return got, fmt.Errorf("stream closed: %w", err)
			}
			return got, err
		}
		if !got {
			w.Events.Connected(true)
		}
		got = true
		now := time.Now()
		switch e := ev.GetEvent().(type) {
		case *pb.ScoreTableEvent_Table:
			t0 := time.Now()
			t, err := Decode(e.Table, now, w.current.Load())
			if err != nil {
				klog.ErrorS(err, "hrl-score: score table refused (keeping the previous one)", "cache", w.Address,
					"generation", e.Table.GetGeneration())
				w.Events.Error("invalid")
				continue
			}
			w.current.Store(t)
			w.Events.Table(t, time.Since(t0))
		case *pb.ScoreTableEvent_Heartbeat:
			if t := w.current.Load(); t != nil && t.Generation == e.Heartbeat.GetGeneration() {
				t.Touch(e.Heartbeat.GetSnapshotAgeS(), now)
			}
			w.Events.Heartbeat()
		}
	}
}
