package events_test

import (
	"context"
	"io"
	"net"
	"net/url"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/schedloop/schedloop/internal/events"
	"github.com/schedloop/schedloop/internal/harness"
	"github.com/schedloop/schedloop/internal/store/storetest"
)

// cutProxy forwards TCP to the apiserver and can cut every open connection,
// which is what a load balancer restart or a network blip does to watches.
type cutProxy struct {
	ln       net.Listener
	upstream string
	mu       sync.Mutex
	conns    []net.Conn
}

func newCutProxy(t *testing.T, upstream string) *cutProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, upstream: upstream}
	t.Cleanup(func() { ln.Close(); p.cut() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", upstream)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, u)
			p.mu.Unlock()
			go func() { io.Copy(u, c); u.Close() }()
			go func() { io.Copy(c, u); c.Close() }()
		}
	}()
	return p
}

// cut closes every connection made so far.
func (p *cutProxy) cut() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	n := len(p.conns) / 2
	p.conns = nil
	return n
}

func waitFor(t *testing.T, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 30*time.Second, true, cond); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// TestWatchSurvivesDroppedConnectionsWithoutDuplicates cuts the watcher's
// connections to the apiserver twice while events change, then restarts the
// watcher (a full re-list): every attempt is stored once, aggregated events
// follow their count, and an unknown message is counted, not fatal.
func TestWatchSurvivesDroppedConnectionsWithoutDuplicates(t *testing.T) {
	c := harness.NewForTest(t, harness.Options{})
	s := storetest.New(t)
	ctx := t.Context()
	u, err := url.Parse(c.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	proxy := newCutProxy(t, u.Host)
	cfg := rest.CopyConfig(c.Config)
	cfg.Host = "https://" + proxy.ln.Addr().String()
	if cfg.TLSClientConfig.ServerName == "" {
		cfg.TLSClientConfig.ServerName = u.Hostname()
	}
	client := kubernetes.NewForConfigOrDie(cfg)
	dyn := dynamic.NewForConfigOrDie(cfg)
	parser := events.NewParser()
	var current *events.Watcher
	start := func() (stop func()) {
		w, err := events.NewWatcher(events.WatchOptions{Client: client, Dynamic: dyn, Store: s, Parser: parser, FlushInterval: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		current = w
		return runWatcher(ctx, t, w)
	}
	stop := start()

	pods := c.Client.CoreV1().Pods("default")
	pod, err := pods.Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "waiter"},
		Spec:       corev1.PodSpec{SchedulerName: "nobody", Containers: []corev1.Container{{Name: "main", Image: "x"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	evs := c.Client.CoreV1().Events("default")
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	event := func(name, msg string, count int32, last metav1.Time) *corev1.Event {
		return &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{Name: name},
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: "default", Name: pod.Name, UID: pod.UID},
			Reason:         "FailedScheduling", Type: corev1.EventTypeWarning, Message: msg, Count: count,
			FirstTimestamp: now, LastTimestamp: last, Source: corev1.EventSource{Component: "default-scheduler"},
		}
	}
	e1, err := evs.Create(ctx, event("waiter.1", "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.", 1, now), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	attempts := func(n int) func(ctx context.Context) (bool, error) {
		return func(ctx context.Context) (bool, error) {
			a, err := s.PodAttempts(ctx, string(pod.UID))
			return len(a) >= n, err
		}
	}
	waitFor(t, "the first attempt", attempts(1))

	if n := proxy.cut(); n == 0 {
		t.Fatal("no connection to cut: the watcher does not go through the proxy")
	}
	e1.Count, e1.LastTimestamp = 2, metav1.NewTime(now.Add(2*time.Second))
	if _, err := evs.Update(ctx, e1, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := evs.Create(ctx, event("waiter.2", "the flux capacitor is not aligned", 1, metav1.NewTime(now.Add(3*time.Second))), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "attempts after the watch was cut", attempts(3))
	proxy.cut()
	if _, err := pods.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "second"},
		Spec: corev1.PodSpec{SchedulerName: "nobody", Containers: []corev1.Container{{Name: "main", Image: "x"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the pod created after the second cut", func(ctx context.Context) (bool, error) {
		var n int
		err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM pods`).Scan(&n)
		return n == 2, err
	})
	stop()
	// A restarted collector lists everything again; Run's last flush at stop
	// writes whatever the re-list produced.
	stop = start()
	waitFor(t, "the restarted watcher to list", func(context.Context) (bool, error) {
		return testutil.ToFloat64(current.Collectors()[2]) == 1, nil // informers_synced
	})
	stop()

	got, err := s.PodAttempts(ctx, string(pod.UID))
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, a := range got {
		keys = append(keys, a.Key)
	}
	slices.Sort(keys)
	want := []string{string(e1.UID) + "/1", string(e1.UID) + "/2"}
	if len(keys) != 3 || keys[0] > keys[1] || !slices.Contains(keys, want[0]) || !slices.Contains(keys, want[1]) {
		t.Fatalf("attempt keys %v, want exactly %v and one for the second event", keys, want)
	}
	stored, err := s.EventsFor(ctx, string(pod.UID))
	if err != nil {
		t.Fatal(err)
	}
	if len(stored) != 2 {
		t.Fatalf("%d events stored, want 2", len(stored))
	}
	for _, e := range stored {
		if e.UID == string(e1.UID) && e.Count != 2 {
			t.Errorf("aggregated event stored with count %d, want 2", e.Count)
		}
	}
	var podRows int
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM pods`).Scan(&podRows); err != nil {
		t.Fatal(err)
	}
	if podRows != 2 {
		t.Errorf("%d pod rows, want 2", podRows)
	}
	if n := testutil.ToFloat64(parser.Collectors()[0]); n < 1 {
		t.Errorf("unparsed messages counted %v, want >= 1", n)
	}
}

// runWatcher runs w until ctx ends or the returned stop is called, which
// waits for it to return and reports an error it returned.
func runWatcher(ctx context.Context, t *testing.T, w *events.Watcher) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("watcher: %v", err)
		}
	}
}
