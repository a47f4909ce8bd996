package predict

import (
	"math"
	"strings"
	"testing"
	"time"
)

func newPredictor(t *testing.T, o Options) *Predictor {
	t.Helper()
	p, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestFallbackHierarchy(t *testing.T) {
	p := newPredictor(t, DefaultOptions())
	train := Features{Namespace: "ml", Queue: "q", Owner: "ann", Name: "bert", GPUs: 8}
	other := Features{Namespace: "ml", Queue: "q", Owner: "bob", Name: "resnet", GPUs: 1}
	for i := 0; i < 3; i++ {
		p.Observe(train, 4*time.Hour, time.Duration(i)*time.Minute)
		p.Observe(other, 10*time.Minute, time.Duration(i)*time.Minute)
	}
	tests := []struct {
		name      string
		f         Features
		want      time.Duration
		wantLevel string
	}{
		{"exact", train, 4 * time.Hour, "namespace/queue/owner/name/gpus"},
		{"same job, another owner", Features{Namespace: "ml", Queue: "q", Owner: "cy", Name: "bert", GPUs: 8}, 4 * time.Hour, "namespace/queue/name/gpus"},
		{"same owner and shape, new name", Features{Namespace: "ml", Queue: "q", Owner: "ann", Name: "gpt", GPUs: 8}, 4 * time.Hour, "namespace/owner/gpus"},
		{"queue and shape", Features{Namespace: "ml", Queue: "q", GPUs: 1}, 10 * time.Minute, "namespace/queue/gpus/priority"},
		{"unseen shape falls to the queue", Features{Namespace: "ml", Queue: "q", GPUs: 4}, 0, "namespace/queue"},
		{"unseen everything falls to all", Features{Namespace: "x", Queue: "y", Owner: "z", Name: "w", GPUs: 3}, 0, "all"},
	}
	for _, tc := range tests {
		got, level := p.Predict(tc.f)
		if level != tc.wantLevel {
			t.Errorf("%s: level %s, want %s", tc.name, level, tc.wantLevel)
		}
		if tc.want > 0 && (got-tc.want).Abs() > time.Second {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	// The queue and global levels mix both kinds: the geometric mean.
	got, _ := p.Predict(Features{Namespace: "ml", Queue: "q", GPUs: 4})
	if want := time.Duration(math.Sqrt(4*3600*600) * float64(time.Second)); (got - want).Abs() > time.Second {
		t.Errorf("queue level %v, want the geometric mean %v", got, want)
	}
}

func TestNoHistoryGetsTheDefault(t *testing.T) {
	p := newPredictor(t, DefaultOptions())
	if got, level := p.Predict(Features{Queue: "never-seen"}); got != DefaultRunTime || level != "default" {
		t.Errorf("empty predictor: %v from %s, want the default %v", got, level, DefaultRunTime)
	}
	// Fewer than MinSamples jobs do not predict yet.
	p.Observe(Features{Queue: "q"}, time.Minute, 0)
	if got, _ := p.Predict(Features{Queue: "q"}); got != DefaultRunTime {
		t.Errorf("one sample predicted %v", got)
	}
}

func TestRecentJobsWeighMore(t *testing.T) {
	o := DefaultOptions()
	o.HalfLife = time.Hour
	o.MinSamples = 1
	p := newPredictor(t, o)
	f := Features{Queue: "q", GPUs: 1}
	p.Observe(f, 100*time.Second, 0)
	// Ten half-lives later a 10000 s job dominates: weights 1/1024 and 1.
	p.Observe(f, 10000*time.Second, 10*time.Hour)
	got, _ := p.Predict(f)
	want := math.Exp((math.Log(100)/1024 + math.Log(10000)) / (1 + 1.0/1024))
	if math.Abs(got.Seconds()-want) > 1 {
		t.Errorf("prediction %v s, want %v s", got.Seconds(), want)
	}
}

func TestTableIsBounded(t *testing.T) {
	o := DefaultOptions()
	o.MaxEntries = 50
	p := newPredictor(t, o)
	for i := 0; i < 1000; i++ {
		p.Observe(Features{Namespace: "ns", Owner: "o", Name: strings.Repeat("x", i%40+1), GPUs: i}, time.Minute, time.Duration(i)*time.Second)
		if p.Len() > o.MaxEntries {
			t.Fatalf("after %d jobs the table holds %d entries, over %d", i+1, p.Len(), o.MaxEntries)
		}
	}
}

func TestOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		mut  func(*Options)
		want string
	}{
		{func(o *Options) { o.HalfLife = 0 }, "field half_life"},
		{func(o *Options) { o.MinSamples = 0 }, "field min_samples"},
		{func(o *Options) { o.MaxEntries = MaxTableEntries + 1 }, "field max_entries"},
		{func(o *Options) { o.Default = -time.Second }, "field default"},
	} {
		o := DefaultOptions()
		tc.mut(&o)
		if _, err := New(o); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %v, want one naming %s", err, tc.want)
		}
	}
}

func TestNormaliseName(t *testing.T) {
	for in, want := range map[string]string{
		"bert-large-20240101-1234": "bert-large",
		"resnet50-train-x7k2q":     "resnet50-train",
		"job-7f9c2":                "job",
		"train_v2.run3":            "train",
		"Sweep-LR":                 "sweep-lr",
		"42":                       "42",
		"":                         "",
		"eval-model":               "eval-model",
	} {
		if got := NormaliseName(in); got != want {
			t.Errorf("NormaliseName(%q) = %q, want %q", in, got, want)
		}
	}
}

func FuzzNormaliseName(f *testing.F) {
	for _, s := range []string{"bert-large-20240101-1234", "job-7f9c2", "a_b.c-1", "--", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n := NormaliseName(s)
		if NormaliseName(n) != n {
			t.Errorf("not idempotent: %q -> %q -> %q", s, n, NormaliseName(n))
		}
		if len(n) > len(s) {
			t.Errorf("%q grew to %q", s, n)
		}
	})
}

func TestMeasure(t *testing.T) {
	a := Measure([]float64{10, 20, 30, 40}, []float64{12, 25, 35, 100})
	if a.Spearman != 1 {
		t.Errorf("same order: spearman %v, want 1", a.Spearman)
	}
	if a.Within2x != 0.75 {
		t.Errorf("within 2x %v, want 0.75 (40 vs 100 is off)", a.Within2x)
	}
	if a := Measure([]float64{1, 2, 3}, []float64{3, 2, 1}); a.Spearman != -1 {
		t.Errorf("reversed order: spearman %v, want -1", a.Spearman)
	}
	if a := Measure(nil, nil); a.Jobs != 0 || a.Spearman != 0 {
		t.Errorf("empty: %+v", a)
	}
}
