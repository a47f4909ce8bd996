package fidelity_test

import (
	"flag"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/schedloop/schedloop/internal/podgroup"
	"github.com/schedloop/schedloop/internal/sim"
	"github.com/schedloop/schedloop/internal/trace"
)

var (
	diffSeed  = flag.Uint64("difftest.seed", 1, "seed of TestDifferential's workload; given, the only seed the policy variants play (else they play policySeeds)")
	diffJobs  = flag.Int("difftest.jobs", 0, "jobs in each differential workload (0: 300 in the full mix, 100 in the shared-rules mix)")
	diffSeeds = flag.Int("difftest.seeds", 5, "workloads (seeds 1..N) BenchmarkSimLiveAgreement plays")
	diffFull  = flag.Bool("difftest.full", false, "TestDifferential plays the full mix (unlabelled nodes, GPU shares, preemption), as make difftest does")
	diffAPIs  = flag.String("difftest.gang-apis", "podgroup,workload", "comma-separated gang APIs (podgroup, workload) the differential tests declare the live side's gangs through, one run each; the reservation and DRA variants play podgroup alone unless it is given")
)

// policySeeds are the workloads the policy variants (reservations, DRA)
// play unless -difftest.seed names one. Seed 2's stream places a 16-member
// gang at an instant when a job leaves the nodes it takes, under a
// standing reservation: a plugin that has not yet seen a change of the
// step (a bind dated late, a claim not yet released) places it otherwise.
var policySeeds = []uint64{1, 2}

// seeds is -difftest.seed when given, else policySeeds.
func seeds() []uint64 {
	if given("difftest.seed") {
		return []uint64{*diffSeed}
	}
	return policySeeds
}

// given reports whether the flag named name was set on the command line.
func given(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// gangAPIs are the gang APIs of -difftest.gang-apis. The policy variants
// (reservations, DRA) play the PodGroup API alone unless the flag is given
// (make difftest gives both), which keeps make test's run time down; the
// default of TestDifferential is both.
func gangAPIs(t *testing.T, policy bool) []podgroup.API {
	t.Helper()
	if policy && !given("difftest.gang-apis") {
		return []podgroup.API{podgroup.APIPodGroup}
	}
	var out []podgroup.API
	for _, name := range strings.Split(*diffAPIs, ",") {
		api, err := podgroup.ParseAPI(name)
		if err != nil {
			t.Fatalf("-difftest.gang-apis: %v", err)
		}
		out = append(out, api)
	}
	return out
}

// sharedRulesMix leaves out what the live scheduler does not yet do as the
// simulator does (unlabelled nodes' topology domain, GPU shares, which
// pods preemption may evict and for whom): lone pods and gangs of 2 to 16
// on two GPU models, with model constraints, in three queues with limits,
// at one priority.
var sharedRulesMix = mix{unlabelled: 0, lone: 0.55, shares: 0, high: 0, model: 0.15}

// minAgreement is the share of pods the simulator must place exactly as
// the live scheduler does: same node, same start, same gang domain.
const minAgreement = 0.98

// TestDifferential plays one seeded workload through the simulator and
// through kube-scheduler with schedloop's plugins, compares them pod by pod,
// prints every disagreement with its cause and requires 98% of the pods to
// agree. By default it plays the shared-rules mix; -difftest.full (make
// difftest) plays the full one. It plays the workload once per gang API
// of -difftest.gang-apis, both by default: gangs declared as
// scheduler-plugins PodGroups, whose members the scheduler places one
// cycle each, and as Workload API PodGroups, which it places in pod-group
// cycles, each member tried on the snapshot and the trials taken back.
// Under the shared-rules mix the Workload API run plays the first 60 jobs
// of the same seed (the policy tests' size), which keeps the package's
// run time down (at 100 jobs it adds about 100 s; seed 1 agrees fully at
// either size); -difftest.jobs sets both.
func TestDifferential(t *testing.T) {
	m, jobs := sharedRulesMix, 100
	if *diffFull {
		m, jobs = defaultMix, 300
	}
	if *diffJobs > 0 {
		jobs = *diffJobs
	}
	for _, api := range gangAPIs(t, false) {
		t.Run(string(api), func(t *testing.T) {
			n := jobs
			if api == podgroup.APIWorkload && !*diffFull && *diffJobs == 0 {
				n = min(jobs, 60)
			}
			sc := generate(*diffSeed, n, m)
			sc.gangAPI = api
			requireAgreement(t, sc)
		})
	}
}

// requireAgreement plays sc on both sides and fails t below minAgreement.
// It returns the comparison for a variant's own checks.
func requireAgreement(t *testing.T, sc scenario) *comparison {
	t.Helper()
	cmp := differential(t, sc)
	cmp.log(t)
	if cmp.ratio() < minAgreement {
		t.Errorf("seed %d: %d of %d pods placed identically (%.4f), below %.2f; rerun with -difftest.seed %d",
			sc.seed, cmp.agree, cmp.pods, cmp.ratio(), minAgreement, sc.seed)
	}
	return cmp
}

// BenchmarkSimLiveAgreement plays the full mix of seeds 1..-difftest.seeds
// (five by default, where make test plays one seed of the shared-rules
// mix and make difftest one of the full mix) and reports the share of all
// their pods placed identically.
func BenchmarkSimLiveAgreement(b *testing.B) {
	jobs := 300
	if *diffJobs > 0 {
		jobs = *diffJobs
	}
	for range b.N {
		agree, pods := 0, 0
		for seed := uint64(1); seed <= uint64(*diffSeeds); seed++ {
			cmp := differential(b, generate(seed, jobs, defaultMix))
			cmp.log(b)
			agree += cmp.agree
			pods += cmp.pods
			// Not a headline (no "@"): the figure of each seed, beside it.
			b.ReportMetric(cmp.ratio(), fmt.Sprintf("seed%d_agreement", seed))
		}
		b.ReportMetric(float64(agree)/float64(pods), "sim_live_agreement@ratio")
	}
}

// comparison is the pod-by-pod result of one workload.
type comparison struct {
	seed        uint64
	pods, agree int
	diffs       []disagreement
	causes      map[string]int // pods per cause
	simTook     time.Duration
	liveTook    time.Duration
	steps       int
}

type disagreement struct {
	job      trace.Job
	pods     int // members placed differently
	at       time.Duration
	sim      string
	live     string
	cause    string
	detail   string
	followup bool // after an earlier disagreement changed the cluster's state
}

func (c *comparison) ratio() float64 {
	if c.pods == 0 {
		return 0
	}
	return float64(c.agree) / float64(c.pods)
}

func (c *comparison) log(t testing.TB) {
	t.Helper()
	t.Logf("seed %d: %d/%d pods identical (%.4f) in %d jobs' worth of %d steps; simulator %v, live %v",
		c.seed, c.agree, c.pods, c.ratio(), len(c.diffs), c.steps, c.simTook.Round(time.Millisecond), c.liveTook.Round(time.Second))
	for _, d := range c.diffs {
		after := ""
		if d.followup {
			after = " [after an earlier divergence]"
		}
		t.Logf("  differs: %s (%s) at %v: simulator %s; scheduler %s; cause: %s%s%s", d.job.Name, describe(d.job),
			d.at, d.sim, d.live, d.cause, d.detail, after)
	}
	causes := make([]string, 0, len(c.causes))
	for k := range c.causes {
		causes = append(causes, k)
	}
	sort.Strings(causes)
	for _, k := range causes {
		t.Logf("  cause %-28s %d pods", k, c.causes[k])
	}
}

func describe(j trace.Job) string {
	var b strings.Builder
	switch {
	case j.Members > 1:
		fmt.Fprintf(&b, "gang %dx%d GPUs", j.Members, j.GPUs)
	case j.GPUMilli > 0:
		fmt.Fprintf(&b, "share %d milli-GPU", j.GPUMilli)
	case len(j.MIG) > 0:
		fmt.Fprintf(&b, "MIG %v", trace.MIGProfiles(j.MIG))
	default:
		fmt.Fprintf(&b, "%d GPUs", j.GPUs)
	}
	fmt.Fprintf(&b, ", %s, priority %d", j.Queue, j.Priority)
	if len(j.GPUModels) > 0 {
		fmt.Fprintf(&b, ", only %s", strings.Join(j.GPUModels, "|"))
	}
	return b.String()
}

// differential runs sc on both sides and compares them.
func differential(t testing.TB, sc scenario) *comparison {
	t.Helper()
	jobs := sim.JobsFromTrace(sc.jobs)
	began := time.Now()
	res, err := sim.Run(sim.NewCluster(sc.inv), jobs, replayConfig(t, sc))
	if err != nil {
		t.Fatalf("seed %d: replay: %v", sc.seed, err)
	}
	simTook := time.Since(began)

	began = time.Now()
	d := newDriver(t, sc)
	for i, o := range res.Jobs {
		if o.State == sim.Done {
			d.simStarts[o.Start] = append(d.simStarts[o.Start], i)
		}
	}
	d.run()
	t.Logf("live: %d scheduling cycles, %d fences, %d steps ended with a stuck nomination; barrier %v, scheduling %v, observing %v",
		d.st.started.Load(), d.fences, d.stuck, d.timing[0], d.timing[1], d.timing[2])
	cmp := compare(sc, res, d.jobs)
	livePreempted := 0
	for _, lj := range d.jobs {
		livePreempted += lj.preemptions
	}
	t.Logf("jobs preempted: simulator %d, live %d", res.Metrics.Preemptions, livePreempted)
	cmp.simTook, cmp.liveTook, cmp.steps = simTook, time.Since(began), d.step
	// Stop this workload's cluster now, not at the test's cleanup: the
	// benchmark plays several workloads in one test, and the harness runs
	// one scheduler per process at a time, so the next workload's
	// scheduler would wait for this one forever.
	d.close()
	if t.Failed() {
		t.Logf("seed %d: the run failed; rerun with -difftest.seed %d", sc.seed, sc.seed)
	}
	return cmp
}

// compare matches each job's pods: members of a gang are interchangeable,
// so a job's pods agree as far as the multisets of their nodes overlap, and
// only when the job started at the same instant on both sides.
func compare(sc scenario, res sim.Result, live []*liveJob) *comparison {
	labels := map[string]map[string]string{}
	for _, n := range sc.inv.Nodes {
		labels[n.Name] = n.Labels
	}
	c := &comparison{seed: sc.seed, causes: map[string]int{}}
	for i, j := range sc.jobs {
		o, lj := res.Jobs[i], live[i]
		c.pods += j.Members
		simStarted := o.State == sim.Done
		same := 0
		switch {
		case !simStarted && !lj.started:
			same = j.Members
		case simStarted && lj.started && o.Start == lj.start:
			same = overlap(o.Nodes, lj.nodes)
		}
		c.agree += same
		if same == j.Members {
			continue
		}
		d := disagreement{job: j, pods: j.Members - same, sim: "never started", live: "never started"}
		d.at = j.Arrival
		if simStarted {
			d.sim = fmt.Sprintf("started %v on %s", o.Start, placement(o.Nodes, labels, j.Members))
			d.at = o.Start
		}
		if lj.started {
			d.live = fmt.Sprintf("started %v on %s", lj.start, placement(lj.nodes, labels, j.Members))
			if !simStarted || lj.start < d.at {
				d.at = lj.start
			}
		}
		d.cause, d.detail = classify(j, o, lj, simStarted, labels)
		c.diffs = append(c.diffs, d)
	}
	slices.SortStableFunc(c.diffs, func(a, b disagreement) int { return int(a.at - b.at) })
	for k := range c.diffs {
		c.diffs[k].followup = c.diffs[k].at > c.diffs[0].at
		c.causes[c.diffs[k].cause] += c.diffs[k].pods
	}
	return c
}

// classify names the reason a job's pods differ. Order matters: the first
// rule that explains the difference wins.
func classify(j trace.Job, o sim.Outcome, lj *liveJob, simStarted bool, labels map[string]map[string]string) (cause, detail string) {
	reason := ""
	if lj.reason != "" {
		reason = fmt.Sprintf(" (scheduler: %q)", lj.reason)
	}
	unlabelled := func(nodes []string) bool {
		for _, n := range nodes {
			if labels[n][trace.LabelRack] == "" {
				return true
			}
		}
		return false
	}
	preemptor := fmt.Sprintf(" (evicted %d jobs simulated; preempted for live: %t)%s", o.Evicted, lj.preemptor, reason)
	switch {
	case o.Preemptions > 0 || lj.preemptions > 0:
		return "preemption victim", fmt.Sprintf(" (preempted %d times simulated, %d live)", o.Preemptions, lj.preemptions)
	case j.Members > 1 && lj.preemptor && o.Evicted == 0:
		// DefaultPreemption evicts for a gang's member as for a lone pod;
		// the simulator never preempts for a gang.
		return "gang member preempted live", preemptor
	case (o.Evicted > 0 || lj.preemptor) && simStarted && (!lj.started || lj.start > o.Start):
		// The scheduler binds a preemptor once its victims are gone; a
		// later start is preemption's timing, not a lack of room.
		return "preemption timing", preemptor
	case o.Evicted > 0 || lj.preemptor:
		return "preemptor placement", preemptor
	case j.GPUMilli > 0:
		return "GPU share", reason
	case simStarted && lj.started && o.Start == lj.start:
		if j.Members > 1 && (unlabelled(o.Nodes) || unlabelled(lj.nodes)) {
			return "unlabelled node domain", ""
		}
		if j.Members > 1 && domain(o.Nodes, labels) != domain(lj.nodes, labels) {
			return "gang domain", ""
		}
		return "node choice", ""
	case simStarted && (!lj.started || lj.start > o.Start):
		switch r := strings.ToLower(lj.reason); {
		case strings.Contains(r, "queue"):
			return "queue admission", reason
		case strings.Contains(r, "topology"):
			return "topology", reason
		case strings.Contains(r, "gang"):
			return "gang admission", reason
		case r == "":
			return "scheduler later, no reason recorded", ""
		}
		return "capacity (scheduler found no node)", reason
	}
	return "simulator later", ""
}

// overlap counts the nodes a and b have in common, as multisets.
func overlap(a, b []string) int {
	left := map[string]int{}
	for _, n := range a {
		left[n]++
	}
	same := 0
	for _, n := range b {
		if left[n] > 0 {
			left[n]--
			same++
		}
	}
	return same
}

// domain is the innermost topology domain holding every node ("" when
// they span the cluster or a node is unlabelled).
func domain(nodes []string, labels map[string]map[string]string) string {
	if len(nodes) == 0 {
		return ""
	}
	if first := nodes[0]; !slices.ContainsFunc(nodes, func(n string) bool { return n != first }) {
		return first
	}
	levels := []string{trace.LabelNVLinkDomain, trace.LabelRack, trace.LabelSpine}
	for _, l := range levels {
		v := labels[nodes[0]][l]
		if v == "" {
			return ""
		}
		if !slices.ContainsFunc(nodes, func(n string) bool { return labels[n][l] != v }) {
			return v
		}
	}
	return ""
}

func placement(nodes []string, labels map[string]map[string]string, members int) string {
	s := "[" + strings.Join(nodes, " ") + "]"
	if members > 1 {
		if dom := domain(nodes, labels); dom != "" {
			s += " in " + dom
		} else {
			s += " across the cluster"
		}
	}
	return s
}
