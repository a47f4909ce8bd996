package schedplugins_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/schedloop/schedloop/internal/podgroup"
	"github.com/schedloop/schedloop/internal/predict"
	"github.com/schedloop/schedloop/internal/profile"
	"github.com/schedloop/schedloop/internal/schedplugins"
	"github.com/schedloop/schedloop/internal/schedplugins/reservation"
)

// publishRuns publishes doc with a predictor table in which the job
// "default/<name>" asking for gpus[name] GPUs in all runs for runs[name]
// seconds, and waits until the scheduler has loaded it.
func (e *env) publishRuns(set *schedplugins.Set, name, doc string, gpus map[string]int, runs map[string]float64) {
	e.t.Helper()
	tb := predict.Table{HalfLifeSeconds: 3600, MinSamples: 1, MaxEntries: 1000, DefaultSeconds: 3600}
	for job, sec := range runs {
		tb.Entries = append(tb.Entries, predict.TableEntry{Level: "namespace/queue/name/gpus",
			Key: ns + "//" + job + "/" + formatFloat(float64(gpus[job])), Seconds: sec, Weight: 1, Samples: 1})
	}
	b, err := json.Marshal(tb)
	if err != nil {
		e.t.Fatal(err)
	}
	cms := e.c.Client.CoreV1().ConfigMaps("kube-system")
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: profile.DefaultConfigMapName},
		Data: map[string]string{profile.ConfigMapKey: doc, profile.PredictorConfigMapKey: string(b)}}
	if _, err := cms.Update(e.t.Context(), cm, metav1.UpdateOptions{}); apierrors.IsNotFound(err) {
		if _, err = cms.Create(e.t.Context(), cm, metav1.CreateOptions{}); err != nil {
			e.t.Fatal(err)
		}
	} else if err != nil {
		e.t.Fatal(err)
	}
	e.waitFor("profile "+name+" loaded", func() bool { return set.Profile.Load().Doc.Name == name })
}

// waitNamedEvent waits for an Event of reason on a pod whose name starts
// with pod and returns its note.
func (e *env) waitNamedEvent(pod, reason string) string {
	e.t.Helper()
	var note string
	e.waitFor(reason+" Event on "+pod, func() bool {
		evs, err := e.c.Client.EventsV1().Events(ns).List(e.t.Context(), metav1.ListOptions{})
		if err != nil {
			return false
		}
		for _, ev := range evs.Items {
			if strings.HasPrefix(ev.Regarding.Name, pod) && ev.Reason == reason {
				note = ev.Note
				return true
			}
		}
		return false
	})
	return note
}

const reserveDoc = "apiVersion: schedloop.io/v1\nkind: SchedulingProfile\nname: reserve\nweights: {bestfit: 1}\nreservation: {enabled: true}\n"

// The head of the order that cannot start gets a reservation: the nodes
// it takes once the running job predicted to end first has ended. A job
// predicted to run past that start is kept off them; one predicted to end
// before it backfills. The reservation ends when its job starts, and when
// its job's pods are deleted, which lets the job it held off start.
func TestLiveReservation(t *testing.T) {
	set := schedplugins.NewSet()
	e := newEnvWith(t, gpuNodes("n", 3, nil), "", set)
	gpus := map[string]int{"holda": 8, "holdb": 8, "podgroup-big": 16, "workload-big": 16, "huge": 16, "long": 8, "short": 8}
	runs := map[string]float64{"holda": 600, "holdb": 7200, "podgroup-big": 3600, "workload-big": 3600, "huge": 3600, "long": 3600, "short": 60}
	e.publishRuns(set, "reserve", reserveDoc, gpus, runs)

	// setup holds two of the three nodes with holda (ending first) and
	// holdb, and has the gang big (two whole nodes) wait for a
	// reservation: holda's node and the free one, from holda's end.
	setup := func(t *testing.T, api podgroup.API, gang string) (reserved []string, free string) {
		e.t = t
		e.pod("holda", ours, 8)
		e.waitBound("holda", 1)
		e.pod("holdb", ours, 8)
		bound := e.waitBound("hold", 2)
		for _, n := range []string{"n00", "n01", "n02"} {
			if n != bound["holda"] && n != bound["holdb"] {
				free = n
			}
		}
		reserved = []string{bound["holda"], free}
		slices.Sort(reserved)
		e.gangAs(api, gang, ours, 2, 8)
		note := e.waitNamedEvent(gang+"-", reservation.ReasonReserved)
		cur := set.Reservations.Current()
		if cur == nil || cur.Job != ns+"/"+gang || !slices.Equal(cur.Nodes, reserved) {
			t.Fatalf("reservation %+v, want %s/%s on %v", cur, ns, gang, reserved)
		}
		if !strings.Contains(note, strings.Join(reserved, " ")) {
			t.Errorf("Reserved Event %q does not name the nodes %v", note, reserved)
		}
		// The start is holda's predicted end: its bind + 600 s.
		if d := time.Until(cur.Start); d < 590*time.Second || d > 600*time.Second {
			t.Errorf("reservation starts in %v, want holda's predicted end, about 600s", d)
		}
		return reserved, free
	}

	for _, api := range gangAPIs {
		t.Run(string(api)+": honoured, backfilled, released when its job starts", func(t *testing.T) {
			big := string(api) + "-big"
			reserved, free := setup(t, api, big)
			e.pod("long", ours, 8)
			e.waitReason("long", "reserved for default/"+big)
			e.pod("short", ours, 8)
			if got := e.waitBound("short", 1)["short"]; got != free {
				t.Errorf("short backfilled onto %s, want the free reserved node %s", got, free)
			}
			if b, _ := e.placement("long"); len(b) != 0 {
				t.Errorf("long started on %v, a node reserved for %s from before its predicted end", b, big)
			}
			e.deletePods("holda")
			e.deletePods("short")
			got := nodesOf(e.waitBound(big+"-", 2))
			if !slices.Equal(got, reserved) {
				t.Errorf("%s started on %v, want its reservation %v", big, got, reserved)
			}
			// long, now the head that cannot start, may take the next one.
			e.waitFor(big+"'s reservation released once it started", func() bool {
				cur := set.Reservations.Current()
				return cur == nil || cur.Job != ns+"/"+big
			})
			e.deletePods("")
		})
	}

	t.Run("released when its job is deleted", func(t *testing.T) {
		_, free := setup(t, podgroup.APIPodGroup, "huge")
		e.pod("long", ours, 8)
		e.waitReason("long", "reserved for default/huge")
		e.deletePods("huge-")
		e.waitNamedEvent("huge-", reservation.ReasonReleased)
		if cur := set.Reservations.Current(); cur != nil {
			t.Errorf("reservation %+v stands after its job was deleted", cur)
		}
		if got := e.waitBound("long", 1)["long"]; got != free {
			t.Errorf("long started on %s, want the node freed of the reservation, %s", got, free)
		}
		e.deletePods("")
	})
}
