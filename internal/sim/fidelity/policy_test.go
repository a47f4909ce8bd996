package fidelity_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/schedloop/schedloop"
	"github.com/schedloop/schedloop/internal/predict"
	"github.com/schedloop/schedloop/internal/profile"
	"github.com/schedloop/schedloop/internal/scoring"
	"github.com/schedloop/schedloop/internal/sim"
	"github.com/schedloop/schedloop/internal/trace"
)

// The queue order policies, played through both sides. A policy reads
// time (the starvation bound, attained service's decay) and the live side's
// clock is the wall's while the replay's is virtual, so only the policy
// that reads none is compared here: shortest predicted service, with the
// same predictor table published to the scheduler and given to the
// replay.

// profileData is the profile ConfigMap's data: doc, and the predictor
// table when one is given.
func profileData(doc string, table ...string) map[string]string {
	data := map[string]string{profile.ConfigMapKey: doc}
	if len(table) > 0 && table[0] != "" {
		data[profile.PredictorConfigMapKey] = table[0]
	}
	return data
}

// serviceTable predicts a run time from a job's GPUs alone (the "gpus"
// level, which every job reaches on both sides whatever its name), one
// that is not monotone in GPUs, so shortest predicted service orders jobs
// neither by size nor by arrival.
func serviceTable() string {
	tb := predict.Table{HalfLifeSeconds: 3600, MinSamples: 1, MaxEntries: 1000, DefaultSeconds: 3600}
	for gpus := 0; gpus <= 128; gpus++ {
		tb.Entries = append(tb.Entries, predict.TableEntry{Level: "gpus", Key: fmt.Sprint(gpus),
			Seconds: float64(60 * ((gpus*7)%11 + 1)), Weight: 1, Samples: 1})
	}
	b, err := json.Marshal(tb)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// tablePredictor predicts in a replay from a published table, keyed as the
// live queue keys pods; it learns nothing, as the scheduler does not.
type tablePredictor struct{ p *predict.Predictor }

func (t tablePredictor) Predict(j *sim.Job, _ time.Duration) time.Duration {
	d, _ := t.p.Predict(predict.JobFeatures(namespace+"/"+j.Name, j.Queue, j.DemandMilli(), j.Priority))
	return d
}

func (tablePredictor) Observe(*sim.Job, time.Duration, time.Duration) {}

// replayConfig is the replay's configuration for sc: its profile's
// parameters and, with a table, its predictions.
func replayConfig(t testing.TB, sc scenario) sim.Config {
	t.Helper()
	doc, err := profile.Parse([]byte(sc.profile))
	if err != nil {
		t.Fatal(err)
	}
	cfg := sim.Config{Params: doc.Params(), Preemption: true, RecordPlacements: true}
	if sc.table != "" {
		p, err := predict.LoadTable([]byte(sc.table))
		if err != nil {
			t.Fatal(err)
		}
		cfg.Predictor = tablePredictor{p}
	}
	return cfg
}

// TestDifferentialShortestService plays the shared-rules workload under
// shortest predicted service on both sides and requires the agreement
// TestDifferential requires.
func TestDifferentialShortestService(t *testing.T) {
	jobs := 60
	if *diffJobs > 0 {
		jobs = *diffJobs
	}
	sc := generate(*diffSeed, jobs, sharedRulesMix)
	sc.profile += "order: shortest-service\n"
	sc.table = serviceTable()
	requireAgreement(t, sc)
}

// TestDifferentialReservation plays the shared-rules workload with
// reservations on: the head job that cannot start reserves the nodes it
// takes once the running jobs predicted to end first have ended, and later
// jobs backfill only where they are predicted to end before then. Run
// times are predicted from the same published table on both sides, and
// the live side plans on the driver's virtual clock. It plays policySeeds,
// under each gang API of gangAPIs.
func TestDifferentialReservation(t *testing.T) {
	jobs := 60
	if *diffJobs > 0 {
		jobs = *diffJobs
	}
	for _, api := range gangAPIs(t, true) {
		for _, seed := range seeds() {
			t.Run(fmt.Sprintf("%s/seed%d", api, seed), func(t *testing.T) {
				sc := generate(seed, jobs, sharedRulesMix)
				sc.profile += "reservation: {enabled: true}\n"
				sc.table = serviceTable()
				sc.gangAPI = api
				requireAgreement(t, sc)
			})
		}
	}
}

// TestDifferentialDRA plays the shared-rules workload on nodes that offer
// their GPUs only through DRA, every other job asking through a claim
// template and the rest as nvidia.com/gpu served by DRA, and requires the
// agreement TestDifferential requires: schedloop's rules count GPUs handed
// out through claims as the simulator counts GPUs. Part of the A100 nodes
// also carry partitioned GPUs (withMIG), and some jobs ask for MIG
// instances through claims of NVIDIA's MIG class, which the simulator
// replays as instances of their profile; they share a queue limited to one
// GPU, which their profiles' shares of a GPU fill (withMIGQueue). It plays
// policySeeds,
// under each gang API of gangAPIs.
func TestDifferentialDRA(t *testing.T) {
	jobs := 60
	if *diffJobs > 0 {
		jobs = *diffJobs
	}
	for _, api := range gangAPIs(t, true) {
		for _, seed := range seeds() {
			t.Run(fmt.Sprintf("%s/seed%d", api, seed), func(t *testing.T) {
				sc := withMIGQueue(withMIG(generate(seed, jobs, sharedRulesMix)))
				picked := map[string]bool{}
				for i, j := range sc.jobs {
					// MIG instances are served through claims alone: a DRA
					// node advertises no nvidia.com/mig-* resource.
					picked[j.Name] = i%2 == 0 || len(j.MIG) > 0
				}
				sc.dra = func(j trace.Job) bool { return picked[j.Name] }
				sc.gangAPI = api
				requireMIGJobsRun(t, sc)
				requireMIGQueueHolds(t, sc)
				for _, d := range requireAgreement(t, sc).diffs {
					// The MIG jobs are few: one the sides start apart,
					// unless an earlier divergence changed the cluster,
					// is a rule they apply apart.
					if len(d.job.MIG) > 0 && !d.followup {
						t.Errorf("seed %d: MIG job %s is the first to differ: simulator %s; scheduler %s", sc.seed, d.job.Name, d.sim, d.live)
					}
				}
			})
		}
	}
}

// requireMIGJobsRun fails t unless the simulator starts some of sc's MIG
// jobs: agreement on jobs neither side runs would say nothing of the
// rules that place MIG instances.
func requireMIGJobsRun(t *testing.T, sc scenario) {
	t.Helper()
	res, err := sim.Run(sim.NewCluster(sc.inv), sim.JobsFromTrace(sc.jobs), replayConfig(t, sc))
	if err != nil {
		t.Fatal(err)
	}
	asked, ran, pods := 0, 0, 0
	for i, j := range sc.jobs {
		if len(j.MIG) > 0 {
			asked++
			if res.Jobs[i].State == sim.Done {
				ran++
				pods += j.Members
			}
		}
	}
	t.Logf("seed %d: %d jobs ask for MIG instances; the simulator runs %d (%d pods)", sc.seed, asked, ran, pods)
	if ran == 0 {
		t.Fatalf("seed %d: no MIG job runs in the simulator", sc.seed)
	}
}

// MIG profiles of the A100 40GB the DRA variant's partitioned GPUs are cut
// into: seven 1g instances on one GPU, or two 3g ones and a 1g.
const (
	mig1g = "1g.5gb"
	mig3g = "3g.20gb"
)

// withMIG gives every other A100 node of sc two partitioned GPUs beside
// its whole ones (eight 1g.5gb and two 3g.20gb instances) and turns every
// fifth lone job into an inference server asking for MIG instances on
// A100s: two 1g instances, or, every other one, one 3g.
func withMIG(sc scenario) scenario {
	small := 0
	for i := range sc.inv.Nodes {
		n := &sc.inv.Nodes[i]
		if n.GPUModel != modelSmall {
			continue
		}
		if small++; small%2 == 0 {
			n.MIG = map[string]int{schedloop.MIGResourcePrefix + mig1g: 8, schedloop.MIGResourcePrefix + mig3g: 2}
		}
	}
	lone := 0
	for i := range sc.jobs {
		j := &sc.jobs[i]
		if j.Members != 1 || j.GPUMilli > 0 {
			continue
		}
		if lone++; lone%5 != 0 {
			continue
		}
		profile, count := mig1g, 2
		if lone%10 == 0 {
			profile, count = mig3g, 1
		}
		j.GPUs, j.GPUModels, j.CPUMilli = 0, []string{modelSmall}, 1000
		j.MIG = map[string]int{schedloop.MIGResourcePrefix + profile: count}
	}
	return sc
}

// migQueue is the queue withMIGQueue puts the MIG jobs in, and its limit
// in GPUs.
const (
	migQueue      = "inference"
	migQueueLimit = 1
)

// withMIGQueue puts sc's MIG jobs in a queue of their own, limited to
// migQueueLimit GPUs.
func withMIGQueue(sc scenario) scenario {
	for i := range sc.jobs {
		if len(sc.jobs[i].MIG) > 0 {
			sc.jobs[i].Queue = migQueue
		}
	}
	sc.profile = strings.Replace(sc.profile, "queues:\n", fmt.Sprintf("queues:\n  %s: {maxGPUs: %d}\n", migQueue, migQueueLimit), 1)
	return sc
}

// requireMIGQueueHolds fails t unless the MIG queue's limit holds back a
// MIG job in the simulator, and would hold back none were every instance
// counted as the least one (scoring.MIGAnyProfile): the MIG jobs running
// together without the limit never count for more than it at one slice per
// instance. The agreement then depends on both sides counting each
// instance by its profile.
func requireMIGQueueHolds(t *testing.T, sc scenario) {
	t.Helper()
	limited, err := sim.Run(sim.NewCluster(sc.inv), sim.JobsFromTrace(sc.jobs), replayConfig(t, sc))
	if err != nil {
		t.Fatal(err)
	}
	free := sc
	free.profile = strings.Replace(sc.profile, fmt.Sprintf("maxGPUs: %d}", migQueueLimit), "maxGPUs: 0}", 1)
	unlimited, err := sim.Run(sim.NewCluster(sc.inv), sim.JobsFromTrace(sc.jobs), replayConfig(t, free))
	if err != nil {
		t.Fatal(err)
	}
	least := map[int]int64{} // job index -> milli-GPU at one slice per instance
	held := 0
	for i, j := range sc.jobs {
		if len(j.MIG) == 0 {
			continue
		}
		r := sim.RequestOf(j)
		for _, c := range r.MIG {
			m, err := scoring.MIGMilli(scoring.MIGAnyProfile, r.GPUModels)
			if err != nil {
				t.Fatal(err)
			}
			least[i] += int64(c) * m
		}
		if limited.Jobs[i].FirstStart > unlimited.Jobs[i].FirstStart {
			held++
		}
	}
	var peak int64
	for i := range least {
		var at int64
		for k, m := range least {
			if o, p := unlimited.Jobs[k], unlimited.Jobs[i]; o.State == sim.Done && o.FirstStart <= p.FirstStart && p.FirstStart < o.End {
				at += m
			}
		}
		peak = max(peak, at)
	}
	t.Logf("seed %d: without the %s queue's limit its MIG jobs count at most %d milli-GPU together at one slice per instance; its limit of %d GPU holds back %d of them",
		sc.seed, migQueue, peak, migQueueLimit, held)
	if peak > migQueueLimit*scoring.MilliPerGPU {
		t.Fatalf("seed %d: at one slice per instance the %s queue's MIG jobs reach %d milli-GPU together, over its limit", sc.seed, migQueue, peak)
	}
	if held == 0 {
		t.Fatalf("seed %d: the %s queue's limit holds back no MIG job in the simulator", sc.seed, migQueue)
	}
}
