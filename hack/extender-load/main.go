// extender-load: drive a kube-scheduler extender the way kube-scheduler's HTTPExtender does (Go net/http,
// keep-alive, a client-side timeout = httpTimeout) and measure each round trip from the caller's side.
//
// Modes:
//
//	-mode seq       one connection, one request after another (kube-scheduler's scheduling cycle): -n requests
//	-mode rate      open loop: -rps requests per second for -duration (0: until SIGTERM or SIGINT), each on a
//	                free worker of -workers
//	                (one keep-alive connection each, -workers connections in all; -redial: Go's default pool
//	                instead, at most 100 idle connections, the others closed and dialled again);
//	                a request finding no free worker counts as "dropped"
//	-mode slowloris -conns connections that each send a request's headers declaring a -declared byte body, then
//	                -send bytes of it (-stall body), or only the request line and a header (-stall headers),
//	                and stall for -duration (or until the server closes them); with -rps > 0 the rate load
//	                runs meanwhile on other connections
//
// -probe URL (rate and slowloris modes; may be given more than once): meanwhile GET each URL every -probe-interval
// on a fresh connection (as the kubelet's liveness probe does) with a -probe-timeout; reported as "probe" {url,
// count, failed, latency_ms} (the first URL) and "probes" (every URL, in the order given).
//
// Bodies: -body FILE (one JSON request) or -bodies FILE (JSON lines, used round-robin). -verb
// prioritize|filter picks how a reply is validated: prioritize = a list with one {Host, Score 0..10} per
// candidate; filter = an object whose NodeNames/Nodes.items names are all candidates and Error is "".
//
// Output: one JSON object on stdout: count, ok, errors (transport errors and timeouts), timeouts, status
// (code -> count), invalid (200 replies that fail validation), neutral (valid 200 replies scoring every candidate
// 0, or listing none: what a shed request gets), dropped, latency_ms {p50, p90, p99, p999, max, mean},
// over_timeout (replies later than -timeout, counted as timeouts by the client), late_scored (replies later than
// -timeout that are not neutral), elapsed_s, rps; with -mode slowloris also "slowloris" {conns, opened, open_at_end,
// closed_by_server, closed_after_s {p50, max}, answers (status line -> count)}; with -probe, "probe"; and the
// same without the client's own connection set-up: reconnects (requests that had to dial a new connection: the
// first of each worker, and every one after a timeout, which closes the connection), server_latency_ms (from the
// moment the request had its connection to the reply) and server_over_timeout (replies later than -timeout by
// that measure); gc_cycles, the generator's own garbage collections while it measured (a collection's work
// competes for the cores with the server measured; GOGC=off with a GOMEMLIMIT leaves them out, to see the server's
// share alone).
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
	neturl "net/url"
	"os"
	"os/signal"
	"runtime"
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
	neutral bool
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

// valid reports whether a 200 reply is well formed for its request's candidates, and whether it is neutral (a
// prioritize reply scoring every candidate 0 or listing none, as a shed request gets: kube-scheduler adds extender
// scores only for the hosts listed).
func valid(verb string, body []byte, cand map[string]bool) (bool, bool) {
	if verb == "prioritize" {
		var hp []struct {
			Host  string
			Score int64
		}
		if json.Unmarshal(body, &hp) != nil {
			return false, false
		}
		if len(hp) == 0 {
			return true, true
		}
		if len(hp) != len(cand) {
			return false, false
		}
		seen := map[string]bool{}
		zero := true
		for _, h := range hp {
			if !cand[h.Host] || seen[h.Host] || h.Score < 0 || h.Score > 10 {
				return false, false
			}
			seen[h.Host] = true
			zero = zero && h.Score == 0
		}
		return true, zero
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
		return false, false
	}
	if fr.NodeNames != nil {
		for _, n := range *fr.NodeNames {
			if !cand[n] {
				return false, false
			}
		}
	}
	if fr.Nodes != nil {
		for _, it := range fr.Nodes.Items {
			if !cand[it.Metadata.Name] {
				return false, false
			}
		}
	}
	return true, false
}

// newClient is a client as kube-scheduler's HTTPExtender: a Transport with keep-alive, Client.Timeout = httpTimeout;
// conns > 0 bounds the connections it holds (open and idle) to conns, so that -workers concurrent requests use
// -workers connections (without the bound, a timed-out request's connection is closed and redialled: a dial storm).
func newClient(timeout time.Duration, conns int) *http.Client {
	tr := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 100,
		IdleConnTimeout:     90 * time.Second,
	}
	if conns > 0 {
		tr.MaxIdleConnsPerHost, tr.MaxConnsPerHost = conns, conns
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
	if resp.StatusCode == 200 {
		ok, neutral := valid(verb, body, r.candidates)
		res.invalid, res.neutral = !ok, neutral
	}
	return res
}

func summary(ms []float64) map[string]float64 {
	sort.Float64s(ms)
	sum := 0.0
	for _, v := range ms {
		sum += v
	}
	mean := 0.0
	if len(ms) > 0 {
		mean = sum / float64(len(ms))
	}
	return map[string]float64{
		"p50": pct(ms, 0.5), "p90": pct(ms, 0.9), "p99": pct(ms, 0.99), "p999": pct(ms, 0.999),
		"max": pct(ms, 1), "mean": mean,
	}
}

// urls is a flag that may be given more than once.
type urls []string

func (u *urls) String() string     { return strings.Join(*u, ",") }
func (u *urls) Set(v string) error { *u = append(*u, v); return nil }

// probe GETs url on a fresh connection every interval until stop is closed (the kubelet's liveness probe).
func probe(url string, interval, timeout time.Duration, stop <-chan struct{}, out chan<- map[string]any) {
	var lat []float64
	failed, count := 0, 0
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			out <- map[string]any{"url": url, "count": count, "failed": failed, "latency_ms": summary(lat)}
			return
		case <-tick.C:
		}
		c := &http.Client{Timeout: timeout, Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil}}
		t0 := time.Now()
		resp, err := c.Get(url)
		count++
		if err == nil {
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				err = fmt.Errorf("status %d", resp.StatusCode)
			}
		}
		ms := float64(time.Since(t0).Microseconds()) / 1000
		lat = append(lat, ms)
		if err != nil {
			failed++
		}
	}
}

// slowloris opens conns connections to the verb URL's host; each sends the headers of a POST declaring a
// declared-byte body and then send bytes of it (stall "body"), or only the request line and one header (stall
// "headers"), and stalls until stop is closed or the server closes it.
func slowloris(url string, conns, declared, send int, stall string, stop <-chan struct{}, out chan<- map[string]any) {
	u, err := neturl.Parse(url)
	if err != nil {
		out <- map[string]any{"error": err.Error()}
		return
	}
	type end struct {
		closedAfter float64
		answer      string
	}
	ends := make(chan end, conns)
	var opened int64
	var wg sync.WaitGroup
	for i := 0; i < conns; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.DialTimeout("tcp", u.Host, 5*time.Second)
			if err != nil {
				ends <- end{-1, "dial error"}
				return
			}
			atomic.AddInt64(&opened, 1)
			t0 := time.Now()
			if stall == "headers" {
				c.Write([]byte(fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\n", u.Path, u.Host)))
			} else {
				head := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"+
					"Content-Length: %d\r\n\r\n", u.Path, u.Host, declared)
				c.Write(append([]byte(head), bytes.Repeat([]byte("{"), send)...))
			}
			done := make(chan end, 1)
			go func() {
				buf := make([]byte, 4096)
				n, _ := c.Read(buf) // blocks until the server answers or closes
				line := strings.SplitN(string(buf[:n]), "\r\n", 2)[0]
				if line == "" {
					line = "closed"
				}
				done <- end{time.Since(t0).Seconds(), line}
			}()
			select {
			case e := <-done:
				ends <- e
			case <-stop:
				ends <- end{-1, "open at end"}
			}
			c.Close()
		}()
	}
	<-stop
	wg.Wait()
	close(ends)
	answers := map[string]int{}
	var after []float64
	openAtEnd := 0
	for e := range ends {
		answers[e.answer]++
		if e.closedAfter >= 0 {
			after = append(after, e.closedAfter)
		} else if e.answer == "open at end" {
			openAtEnd++
		}
	}
	sort.Float64s(after)
	out <- map[string]any{
		"conns": conns, "opened": opened, "open_at_end": openAtEnd, "closed_by_server": len(after),
		"closed_after_s": map[string]float64{"p50": pct(after, 0.5), "max": pct(after, 1)}, "answers": answers,
	}
}

func pct(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted)-1) + 0.5)
	return sorted[i]
}

// rate sends rps requests per second for duration (0: until SIGTERM or SIGINT), each on a free worker of workers
// (one keep-alive connection each); a request finding no free worker is counted in dropped.
func rate(url, verb string, reqs []request, rps float64, duration time.Duration, workers int,
	timeout time.Duration, redial bool, dropped *int64) []result {
	conns := workers
	if redial {
		conns = 0
	}
	c := newClient(timeout, conns)
	jobs := make(chan request, workers)
	var mu sync.Mutex
	var wg sync.WaitGroup
	var results []result
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range jobs {
				res := do(c, url, verb, r, timeout)
				mu.Lock()
				results = append(results, res)
				mu.Unlock()
			}
		}()
	}
	interval := time.Duration(float64(time.Second) / rps)
	var sent int64
	next := time.Now()
	end := next.Add(duration)
	stop := make(chan os.Signal, 1)
	if duration == 0 {
		signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	}
	running := func() bool {
		if duration > 0 {
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
			atomic.AddInt64(dropped, 1)
		}
		sent++
		next = next.Add(interval)
		if d := time.Until(next); d > 0 {
			time.Sleep(d)
		}
	}
	close(jobs)
	wg.Wait()
	return results
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
	var probeURLs urls
	flag.Var(&probeURLs, "probe", "rate, slowloris: GET this URL meanwhile on fresh connections (liveness); repeatable")
	probeEvery := flag.Duration("probe-interval", 100*time.Millisecond, "time between probes")
	probeTimeout := flag.Duration("probe-timeout", 2*time.Second, "probe timeout (the chart's livenessProbe)")
	conns := flag.Int("conns", 200, "slowloris: connections")
	declared := flag.Int("declared", 100000, "slowloris: the Content-Length each declares")
	send := flag.Int("send", 1, "slowloris: body bytes each sends before it stalls")
	stall := flag.String("stall", "body", "slowloris: body (a declared body never sent) | headers (headers never ended)")
	redial := flag.Bool("redial", false, "rate: keep at most 100 idle connections, redialling beyond (a dial storm "+
		"when replies are late); default: exactly -workers keep-alive connections")
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
	extra := map[string]any{}
	var gc0, gc1 runtime.MemStats // the generator's own garbage collections while it measures (gc_cycles)
	t0 := time.Now()
	start := func() { runtime.ReadMemStats(&gc0); t0 = time.Now() }
	switch *mode {
	case "seq":
		c := newClient(*timeout, 1)
		for i := 0; i < *warmup; i++ {
			do(c, *url, *verb, reqs[i%len(reqs)], *timeout)
		}
		start()
		results = make([]result, 0, *n)
		for i := 0; i < *n; i++ {
			results = append(results, do(c, *url, *verb, reqs[i%len(reqs)], *timeout))
		}
	case "rate", "slowloris":
		stop := make(chan struct{})
		extras := map[string]chan map[string]any{}
		probed := make([]chan map[string]any, len(probeURLs))
		for i, u := range probeURLs {
			probed[i] = make(chan map[string]any, 1)
			go probe(u, *probeEvery, *probeTimeout, stop, probed[i])
		}
		if *mode == "slowloris" {
			extras["slowloris"] = make(chan map[string]any, 1)
			go slowloris(*url, *conns, *declared, *send, *stall, stop, extras["slowloris"])
			time.Sleep(200 * time.Millisecond) // the held connections first
		}
		start()
		if *rps > 0 {
			results = rate(*url, *verb, reqs, *rps, *duration, *workers, *timeout, *redial, &dropped)
		} else {
			time.Sleep(*duration)
		}
		close(stop)
		for k, ch := range extras {
			extra[k] = <-ch
		}
		if len(probed) > 0 {
			all := make([]map[string]any, len(probed))
			for i, ch := range probed {
				all[i] = <-ch
			}
			extra["probe"], extra["probes"] = all[0], all
		}
	default:
		fmt.Fprintln(os.Stderr, "extender-load: -mode: expected seq, rate or slowloris, got", *mode)
		os.Exit(2)
	}
	elapsed := time.Since(t0).Seconds()
	runtime.ReadMemStats(&gc1)
	lat := make([]float64, 0, len(results))
	srv := make([]float64, 0, len(results))
	status := map[string]int{}
	var errs, timeouts, invalid, ok, over, neutral, lateScored, srvOver, reconnects int
	for _, r := range results {
		lat = append(lat, float64(r.latency.Microseconds())/1000)
		srv = append(srv, float64(r.server.Microseconds())/1000)
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
			if !r.neutral {
				lateScored++
			}
		}
		if r.status != 0 {
			status[fmt.Sprint(r.status)]++
		}
		if r.invalid {
			invalid++
		}
		if r.neutral {
			neutral++
		}
		if !r.err && r.status == 200 && !r.invalid {
			ok++
		}
	}
	out := map[string]any{
		"count": len(results), "ok": ok, "errors": errs, "timeouts": timeouts, "status": status,
		"invalid": invalid, "neutral": neutral, "dropped": dropped, "over_timeout": over, "late_scored": lateScored,
		"elapsed_s": elapsed, "rps": float64(len(results)) / elapsed, "latency_ms": summary(lat),
		"reconnects": reconnects, "server_over_timeout": srvOver, "server_latency_ms": summary(srv),
		"gc_cycles": gc1.NumGC - gc0.NumGC,
	}
	for k, v := range extra {
		out[k] = v
	}
	enc := json.NewEncoder(os.Stdout)
	if err := enc.Encode(out); err != nil {
		os.Exit(1)
	}
}
