package publish_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/schedloop/schedloop/internal/harness"
	"github.com/schedloop/schedloop/internal/predict"
	"github.com/schedloop/schedloop/internal/profile"
	"github.com/schedloop/schedloop/internal/tuner"
	"github.com/schedloop/schedloop/internal/tuner/publish"
)

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// One apiserver serves both tests: starting one costs seconds.
func TestAgainstAPIServer(t *testing.T) {
	c := harness.NewForTest(t, harness.Options{})
	ctx := context.Background()

	t.Run("ConfigMap is created, then updated", func(t *testing.T) {
		d := profile.Default()
		seed := tuner.EvidenceAnnotationPrefix + "seed"
		table := &predict.Table{HalfLifeSeconds: 3600, MinSamples: 1, MaxEntries: 100, DefaultSeconds: 600,
			Entries: []predict.TableEntry{{Level: "all", Seconds: 60, Weight: 1, Samples: 1}}}
		if _, err := publish.ConfigMap(ctx, c.Client, "kube-system", profile.DefaultConfigMapName, d, table, map[string]string{seed: "1"}); err != nil {
			t.Fatal(err)
		}
		cm, err := c.Client.CoreV1().ConfigMaps("kube-system").Get(ctx, profile.DefaultConfigMapName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p, err := predict.LoadTable([]byte(cm.Data[profile.PredictorConfigMapKey])); err != nil {
			t.Errorf("published predictor table does not load: %v", err)
		} else if got, _ := p.Predict(predict.Features{}); got.Round(time.Second) != time.Minute {
			t.Errorf("published table predicts %v, want 1m", got)
		}
		d2 := d
		d2.Name, d2.Weights = "tuned-2", map[string]float64{"bestfit": 7}
		target := publish.ConfigMapPublisher{Client: c.Client, Namespace: "kube-system", Name: profile.DefaultConfigMapName}
		verify := tuner.EvidenceAnnotationPrefix + "verify"
		if _, err := target.Publish(ctx, d2, nil, map[string]string{verify: "tuner verify tuned-2"}); err != nil {
			t.Fatal(err)
		}
		cm, err = c.Client.CoreV1().ConfigMaps("kube-system").Get(ctx, profile.DefaultConfigMapName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got, err := profile.Parse([]byte(cm.Data[profile.ConfigMapKey]))
		if err != nil || got.Name != "tuned-2" || got.Weights["bestfit"] != 7 || cm.Annotations[publish.ProfileAnnotation] != "tuned-2" {
			t.Errorf("ConfigMap holds %+v (%v), annotations %v", got, err, cm.Annotations)
		}
		// The first profile's evidence must not pass for the second's.
		if _, stale := cm.Data[profile.PredictorConfigMapKey]; stale {
			t.Error("a profile published without a predictor table kept the previous profile's table")
		}
		if _, stale := cm.Annotations[seed]; stale || cm.Annotations[verify] != "tuner verify tuned-2" {
			t.Errorf("evidence annotations %v: want only the second profile's", cm.Annotations)
		}
		bad := d
		bad.Weights = map[string]float64{"gravity": 1}
		if _, err := publish.ConfigMap(ctx, c.Client, "kube-system", profile.DefaultConfigMapName, bad, nil, nil); err == nil {
			t.Error("an invalid profile was published")
		}
	})

	t.Run("one leader at a time", func(t *testing.T) {
		var leaders, maxLeaders, runs atomic.Int32
		e := publish.Election{Namespace: "kube-system", Lease: "schedloop-tuner",
			LeaseDuration: 2 * time.Second, RenewDeadline: time.Second, RetryPeriod: 200 * time.Millisecond}
		run := func(ctx context.Context) {
			n := leaders.Add(1)
			for m := maxLeaders.Load(); n > m && !maxLeaders.CompareAndSwap(m, n); m = maxLeaders.Load() {
			}
			runs.Add(1)
			<-ctx.Done()
			leaders.Add(-1)
		}
		ctxA, stopA := context.WithCancel(ctx)
		ctxB, stopB := context.WithCancel(ctx)
		defer stopB()
		doneA := make(chan error, 1)
		go func() { ea := e; ea.Identity = "a"; doneA <- publish.LeaderElected(ctxA, c.Client, ea, run) }()
		waitFor(t, "a first leader", func() bool { return runs.Load() == 1 })
		go func() { eb := e; eb.Identity = "b"; _ = publish.LeaderElected(ctxB, c.Client, eb, run) }()
		stopA() // a releases the lease on cancel; b takes over
		if err := <-doneA; err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the second replica to lead", func() bool { return runs.Load() == 2 })
		if maxLeaders.Load() != 1 {
			t.Errorf("%d replicas led at once", maxLeaders.Load())
		}
		if err := publish.LeaderElected(ctx, c.Client, publish.Election{}, run); err == nil {
			t.Error("an election without a lease name was accepted")
		}
	})
}
