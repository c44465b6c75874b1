// extender-load: drive a kube-scheduler extender the way kube-scheduler's HTTPExtender does (Go net/http,
// keep-alive, a client-side timeout = httpTimeout) and measure each round trip from the caller's side.
//
// Modes:
//
//	-mode seq   one connection, one request after another (kube-scheduler's scheduling cycle): -n requests
//	-mode rate  open loop: -rps requests per second for -duration (0: until SIGTERM or SIGINT), each on a free
//	            worker of -workers (one keep-alive connection each); a request finding no free worker counts as
//	            "dropped"
//
// Bodies: -body FILE (one JSON request) or -bodies FILE (JSON lines, used round-robin). -verb
// prioritize|filter picks how a reply is validated: prioritize = a list with one {Host, Score 0..10} per
// candidate; filter = an object whose NodeNames/Nodes.items names are all candidates and Error is "".
//
// Output: one JSON object on stdout: count, ok, errors (transport errors and timeouts), timeouts, status
// (code -> count), invalid (200 replies that fail validation), dropped, latency_ms {p50, p90, p99, p999, max,
// mean}, over_timeout (replies later than -timeout, counted as timeouts by the client), elapsed_s, rps; and the
// same without the client's own connection set-up: reconnects (requests that had to dial a new connection: the
// first of each worker, and every one after a timeout, which closes the connection), server_latency_ms (from the
// moment the request had its connection to the reply) and server_over_timeout (replies later than -timeout by
// that measure).
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"os/signal"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

type request struct {
	body       []byte
	candidates map[string]bool
}

type result struct {
	latency time.Duration
	server  time.Duration // from GotConn to the reply: without the dial of a new connection
	dialed  bool          // the request waited for a new connection
	status  int
	err     bool
	timeout bool
	invalid bool
}

func loadBodies(path string, lines bool) ([]request, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var raw [][]byte
	if lines {
		sc := bufio.NewScanner(bytes.NewReader(data))
		sc.Buffer(make([]byte, 1<<20), 1<<30)
		for sc.Scan() {
			if l := bytes.TrimSpace(sc.Bytes()); len(l) > 0 {
				raw = append(raw, append([]byte(nil), l...))
			}
		}
		if err := sc.Err(); err != nil {
			return nil, err
		}
	} else {
		raw = [][]byte{data}
	}
	out := make([]request, 0, len(raw))
	for i, b := range raw {
		var args struct {
			NodeNames []string
			Nodes     *struct {
				Items []struct {
					Metadata struct{ Name string } `json:"metadata"`
				} `json:"items"`
			}
		}
		if err := json.Unmarshal(b, &args); err != nil {
			return nil, fmt.Errorf("%s: body %d: %v", path, i, err)
		}
		c := map[string]bool{}
		for _, n := range args.NodeNames {
			c[n] = true
		}
		if args.Nodes != nil {
			for _, it := range args.Nodes.Items {
				c[it.Metadata.Name] = true
			}
		}
		out = append(out, request{b, c})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no request bodies", path)
	}
	return out, nil
}

func valid(verb string, body []byte, cand map[string]bool) bool {
	if verb == "prioritize" {
		var hp []struct {
			Host  string
			Score int64
		}
		if json.Unmarshal(body, &hp) != nil || len(hp) != len(cand) {
			return false
		}
		seen := map[string]bool{}
		for _, h := range hp {
			if !cand[h.Host] || seen[h.Host] || h.Score < 0 || h.Score > 10 {
				return false
			}
			seen[h.Host] = true
		}
		return true
	}
	var fr struct {
		NodeNames *[]string
		Nodes     *struct {
			Items []struct {
				Metadata struct{ Name string } `json:"metadata"`
			} `json:"items"`
		}
		Error string
	}
	if json.Unmarshal(body, &fr) != nil || fr.Error != "" {
		return false
	}
	if fr.NodeNames != nil {
		for _, n := range *fr.NodeNames {
			if !cand[n] {
				return false
			}
		}
	}
	if fr.Nodes != nil {
		for _, it := range fr.Nodes.Items {
			if !cand[it.Metadata.Name] {
				return false
			}
		}
	}
	return true
}

func newClient(timeout time.Duration) *http.Client {
	// as kube-scheduler's HTTPExtender: a Transport with keep-alive, Client.Timeout = httpTimeout
	tr := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 100,
		IdleConnTimeout:     90 * time.Second,
	}
	return &http.Client{Transport: tr, Timeout: timeout}
}

func do(c *http.Client, url, verb string, r request, timeout time.Duration) result {
	t0 := time.Now()
	var got time.Time
	dialed := false
	trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { got, dialed = time.Now(), !i.Reused }}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), http.MethodPost, url,
		bytes.NewReader(r.body))
	if err != nil {
		return result{err: true}
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	since := func(end time.Time) time.Duration {
		if got.IsZero() {
			return end.Sub(t0)
		}
		return end.Sub(got)
	}
	if err != nil {
		end := time.Now()
		to := strings.Contains(err.Error(), "Timeout") || strings.Contains(err.Error(), "deadline")
		return result{latency: end.Sub(t0), server: since(end), dialed: dialed, err: true, timeout: to}
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	end := time.Now()
	lat := end.Sub(t0)
	if err != nil {
		return result{latency: lat, server: since(end), dialed: dialed, err: true, status: resp.StatusCode,
			timeout: lat >= timeout}
	}
	res := result{latency: lat, server: since(end), dialed: dialed, status: resp.StatusCode}
	if resp.StatusCode == 200 && !valid(verb, body, r.candidates) {
		res.invalid = true
	}
	return res
}

func pct(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted)-1) + 0.5)
	return sorted[i]
}

func main() {
	url := flag.String("url", "", "the verb's URL, e.g. http://127.0.0.1:8888/scheduler/prioritize")
	verb := flag.String("verb", "prioritize", "prioritize | filter (how replies are validated)")
	bodyFile := flag.String("body", "", "one JSON request body")
	bodiesFile := flag.String("bodies", "", "JSON lines, one request body each, used round-robin")
	mode := flag.String("mode", "seq", "seq | rate")
	n := flag.Int("n", 1000, "seq: requests")
	warmup := flag.Int("warmup", 50, "seq: requests sent first and not measured")
	rps := flag.Float64("rps", 100, "rate: requests per second")
	duration := flag.Duration("duration", 10*time.Second, "rate: how long (0: until SIGTERM or SIGINT)")
	workers := flag.Int("workers", 64, "rate: concurrent connections at most")
	timeout := flag.Duration("timeout", 300*time.Millisecond, "client timeout (kube-scheduler's httpTimeout)")
	flag.Parse()
	if *url == "" || (*bodyFile == "") == (*bodiesFile == "") {
		fmt.Fprintln(os.Stderr, "extender-load: -url and exactly one of -body / -bodies are required")
		os.Exit(2)
	}
	path, lines := *bodyFile, false
	if *bodiesFile != "" {
		path, lines = *bodiesFile, true
	}
	reqs, err := loadBodies(path, lines)
	if err != nil {
		fmt.Fprintln(os.Stderr, "extender-load:", err)
		os.Exit(2)
	}
	var results []result
	var dropped int64
	t0 := time.Now()
	switch *mode {
	case "seq":
		c := newClient(*timeout)
		for i := 0; i < *warmup; i++ {
			do(c, *url, *verb, reqs[i%len(reqs)], *timeout)
		}
		t0 = time.Now()
		results = make([]result, 0, *n)
		for i := 0; i < *n; i++ {
			results = append(results, do(c, *url, *verb, reqs[i%len(reqs)], *timeout))
		}
	case "rate":
		c := newClient(*timeout)
		jobs := make(chan request, *workers)
		var mu sync.Mutex
		var wg sync.WaitGroup
		for w := 0; w < *workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for r := range jobs {
					res := do(c, *url, *verb, r, *timeout)
					mu.Lock()
					results = append(results, res)
					mu.Unlock()
				}
			}()
		}
		interval := time.Duration(float64(time.Second) / *rps)
		var sent int64
		next := time.Now()
		end := next.Add(*duration)
		stop := make(chan os.Signal, 1)
		if *duration == 0 {
			signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
		}
		running := func() bool {
			if *duration > 0 {
				return time.Now().Before(end)
			}
			select {
			case <-stop:
				return false
			default:
				return true
			}
		}
		for running() {
			select {
			case jobs <- reqs[int(sent)%len(reqs)]:
			default:
				atomic.AddInt64(&dropped, 1)
			}
			sent++
			next = next.Add(interval)
			if d := time.Until(next); d > 0 {
				time.Sleep(d)
			}
		}
		close(jobs)
		wg.Wait()
	default:
		fmt.Fprintln(os.Stderr, "extender-load: -mode: expected seq or rate, got", *mode)
		os.Exit(2)
	}
	elapsed := time.Since(t0).Seconds()
	lat := make([]float64, 0, len(results))
	srv := make([]float64, 0, len(results))
	status := map[string]int{}
	var errs, timeouts, invalid, ok, over, srvOver, reconnects int
	sum := 0.0
	for _, r := range results {
		ms := float64(r.latency.Microseconds()) / 1000
		lat = append(lat, ms)
		srv = append(srv, float64(r.server.Microseconds())/1000)
		sum += ms
		if r.server >= *timeout {
			srvOver++
		}
		if r.dialed {
			reconnects++
		}
		if r.err {
			errs++
		}
		if r.timeout {
			timeouts++
		}
		if r.latency >= *timeout {
			over++
		}
		if r.status != 0 {
			status[fmt.Sprint(r.status)]++
		}
		if r.invalid {
			invalid++
		}
		if !r.err && r.status == 200 && !r.invalid {
			ok++
		}
	}
	sort.Float64s(lat)
	sort.Float64s(srv)
	mean := 0.0
	if len(lat) > 0 {
		mean = sum / float64(len(lat))
	}
	out := map[string]any{
		"count": len(results), "ok": ok, "errors": errs, "timeouts": timeouts, "status": status,
		"invalid": invalid, "dropped": dropped, "over_timeout": over, "elapsed_s": elapsed,
		"rps": float64(len(results)) / elapsed,
		"latency_ms": map[string]float64{
			"p50": pct(lat, 0.5), "p90": pct(lat, 0.9), "p99": pct(lat, 0.99), "p999": pct(lat, 0.999),
			"max": pct(lat, 1), "mean": mean,
		},
		"reconnects": reconnects, "server_over_timeout": srvOver,
		"server_latency_ms": map[string]float64{
			"p50": pct(srv, 0.5), "p99": pct(srv, 0.99), "max": pct(srv, 1),
		},
	}
	enc := json.NewEncoder(os.Stdout)
	if err := enc.Encode(out); err != nil {
		os.Exit(1)
	}
}
