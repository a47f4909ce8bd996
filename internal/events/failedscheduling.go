package events

import (
	"regexp"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/schedloop/schedloop"
	"github.com/schedloop/schedloop/internal/reasons"
)

// FailedScheduling is a kube-scheduler FailedScheduling message broken into
// counts. Reasons and Preemption map each reason to the number of nodes that
// gave it; a reason that applies to the pod rather than to nodes (a PreFilter
// rejection) counts every node. Counts may sum to more than TotalNodes because
// one node can fail for several reasons (say, both cpu and memory).
type FailedScheduling struct {
	// TotalNodes is the N of "0/N nodes are available"; 0 when the message
	// has no such header (plugin errors, unknown text).
	TotalNodes int
	Reasons    map[string]int
	// Preemption holds the counts of the "preemption: 0/N nodes are
	// available: ..." suffix: why evicting lower-priority pods would not help.
	// They explain the failed rescue, not the wait, so they do not vote on
	// Category.
	Preemption      map[string]int
	PreemptionNodes int
	// Plugin names the plugin of a "running <Point> plugin \"X\": ..." error.
	Plugin   string
	Category schedloop.WaitCategory
	// Parsed is false when the message had no shape this parser knows; the
	// attempt is then filed under WaitOther with the raw Message kept.
	Parsed  bool
	Message string
}

// Attempt copies the parsed counts into a SchedulingAttempt. Preemption counts
// are stored in the same Reasons map under a "preemption: " prefix, because
// SchedulingAttempt has one map and the prefix cannot collide with a
// kube-scheduler reason.
func (f FailedScheduling) Attempt(a *schedloop.SchedulingAttempt) {
	a.Category = f.Category
	a.TotalNodes = f.TotalNodes
	a.Message = f.Message
	a.Reasons = make(map[string]int, len(f.Reasons)+len(f.Preemption))
	for r, n := range f.Reasons {
		a.Reasons[r] = n
	}
	for r, n := range f.Preemption {
		a.Reasons[PreemptionKeyPrefix+r] = n
	}
}

// PreemptionKeyPrefix marks preemption counts in SchedulingAttempt.Reasons.
const PreemptionKeyPrefix = "preemption: "

// Parser parses FailedScheduling messages and counts what it could not read.
// The zero value is not usable; call NewParser. A Parser is safe for
// concurrent use.
type Parser struct {
	unparsed       prometheus.Counter
	unknownReasons prometheus.Counter
}

// NewParser returns a Parser whose counters are exposed through Collectors.
func NewParser() *Parser {
	return &Parser{
		unparsed: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "schedloop", Subsystem: "events", Name: "failedscheduling_unparsed_total",
			Help: "FailedScheduling messages whose shape was not recognised; they are stored raw under category other.",
		}),
		unknownReasons: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "schedloop", Subsystem: "events", Name: "failedscheduling_unknown_reasons_total",
			Help: "Reasons inside parsed FailedScheduling messages that map to no wait category.",
		}),
	}
}

// Collectors returns the parser's counters for registration.
func (p *Parser) Collectors() []prometheus.Collector {
	return []prometheus.Collector{p.unparsed, p.unknownReasons}
}

// Parse breaks msg into counts and a category, counting what it could not read.
func (p *Parser) Parse(msg string) FailedScheduling {
	f := ParseFailedScheduling(msg)
	if !f.Parsed {
		p.unparsed.Inc()
	}
	for r := range f.Reasons {
		if _, own := reasons.Parse(r); !own && categorize(r) == schedloop.WaitOther {
			p.unknownReasons.Inc()
		}
	}
	return f
}

const (
	noNodesMsg = "no nodes available to schedule pods"
)

var (
	// Volcano writes "unavailable" where kube-scheduler writes "available"
	// (volcano-sh/volcano pkg/scheduler/api/unschedule_info.go, FitErrors.Error).
	headerRE       = regexp.MustCompile(`^0/(\d+) nodes are (?:un)?available:`)
	placementsRE   = regexp.MustCompile(`^0/(\d+) placements are available, first placement status: (.*)$`)
	pluginErrorRE  = regexp.MustCompile(`^running (?:[A-Za-z]+ on )?([A-Za-z]+) plugin "([^"]*)": `)
	countedItemRE  = regexp.MustCompile(`^(\d+) (.+)$`)
	separatorCount = regexp.MustCompile(`^, \d+ `)
	// The end of FitError's node list and the start of DefaultPreemption's
	// PostFilter message, empty PostFilter reasons joined before it.
	postFilterRE = regexp.MustCompile(`\.(?: ,)* (?:preemption: |((?:[^.]*; )?` +
		strings.ReplaceAll(regexp.QuoteMeta(reasons.GangNoPreemptFormat), "%s", `\S+`) + `\.?)$)`)
)

// ParseFailedScheduling breaks a kube-scheduler FailedScheduling message into
// counts. It never fails: text it cannot read yields Parsed=false and
// category other, with the raw message kept.
//
// The shape it reads is what FitError.Error prints (kube-scheduler
// pkg/scheduler/framework/types.go):
//
//	0/N nodes are available: <prefilter message>. [preemption: 0/N nodes are available: ...]
//	0/N nodes are available: <n> <reason>, <n> <reason>. [preemption: ...]
//
// plus plugin errors ("running PreFilter plugin \"X\": ...") and the Permit
// timeout ("rejected due to timeout after waiting 60s at ...").
func ParseFailedScheduling(msg string) FailedScheduling {
	f := FailedScheduling{Message: msg, Category: schedloop.WaitOther}
	// The scheduler prefixes Bind failures; what follows is a plugin error.
	text := strings.TrimPrefix(strings.TrimSpace(msg), "binding rejected: ")

	if m := pluginErrorRE.FindStringSubmatch(text); m != nil {
		f.Plugin = m[2]
		rest := strings.TrimSuffix(strings.TrimSpace(text[len(m[0]):]), ".")
		// A PreFilter error can wrap a full FitError-style message.
		if inner := ParseFailedScheduling(rest); inner.Parsed && inner.TotalNodes > 0 {
			inner.Plugin, inner.Message = f.Plugin, msg
			return inner
		}
		f.Reasons = map[string]int{rest: 0}
		f.Parsed = true
		f.Category = primaryCategory(f.Reasons)
		return f
	}

	// kube-scheduler's pod-group cycle when no placement fits the group
	// (pkg/scheduler/schedule_one_podgroup.go,
	// podGroupSchedulingPlacementAlgorithm). With more than one placement
	// each is a topology domain the TopologyPlacement plugin made from the
	// group's topology constraint, and the group fits in none: a topology
	// wait. One placement is the whole cluster: the first placement's
	// status says why.
	if m := placementsRE.FindStringSubmatch(text); m != nil {
		inner := ParseFailedScheduling(m[2])
		inner.Message = msg
		if n, err := strconv.Atoi(m[1]); err == nil && n > 1 {
			inner.Parsed, inner.Category = true, schedloop.WaitTopology
			if inner.Reasons == nil {
				inner.Reasons = map[string]int{}
			}
			inner.Reasons["pod group fits in no placement"] = 0
		}
		return inner
	}

	if text == noNodesMsg || text == noNodesMsg+"." {
		f.Reasons = map[string]int{noNodesMsg: 0}
		f.Parsed = true
		return f
	}

	// FitError appends the PostFilter message after the period that ends the
	// node list; DefaultPreemption's starts with "preemption: ". The
	// framework joins the PostFilter plugins' reasons with ", ", so a plugin
	// that gave an empty reason before it leaves ". , preemption: " (as
	// schedloop's gang plugin did before it stopped giving one).
	// schedloop's gang plugin writes its own PostFilter message there for a
	// gang, which does not preempt; it is kept whole as the preemption part.
	main, preemption := text, ""
	if at := postFilterRE.FindAllStringSubmatchIndex(text, -1); at != nil {
		last := at[len(at)-1]
		main, preemption = text[:last[0]+1], text[last[1]:]
		if last[2] >= 0 {
			preemption = text[last[2]:last[3]]
		}
	}

	total, reasonsMap, ok := parseNodeList(main)
	if !ok {
		if o, ok := parseOtherScheduler(text); ok {
			o.Message = msg
			return o
		}
		// Messages that are one reason without a node header, such as the
		// Permit timeout, still carry a category worth keeping.
		if c := categorize(strings.TrimSuffix(text, ".")); c != schedloop.WaitOther {
			f.Reasons = map[string]int{strings.TrimSuffix(text, "."): 0}
			f.Parsed = true
			f.Category = c
		}
		return f
	}
	f.TotalNodes, f.Reasons, f.Parsed = total, reasonsMap, true
	if preemption != "" {
		if pt, pr, ok := parseNodeList(preemption); ok {
			f.PreemptionNodes, f.Preemption = pt, pr
		} else {
			// "not eligible due to preemptionPolicy=Never." and the like.
			f.Preemption = map[string]int{strings.TrimSuffix(preemption, "."): 0}
		}
	}
	f.Category = primaryCategory(f.Reasons)
	return f
}

// parseNodeList reads "0/N nodes are available: <body>." into N and counts.
func parseNodeList(s string) (int, map[string]int, bool) {
	m := headerRE.FindStringSubmatch(s)
	if m == nil {
		return 0, nil, false
	}
	total, err := strconv.Atoi(m[1])
	if err != nil {
		return 0, nil, false
	}
	body := strings.TrimSpace(s[len(m[0]):])
	body = strings.TrimSuffix(body, ".")
	counts := map[string]int{}
	if body == "" {
		return total, counts, true
	}
	items := splitCounted(body)
	if len(items) == 1 {
		if cm := countedItemRE.FindStringSubmatch(items[0]); cm == nil {
			// A PreFilter rejection: one message for the pod, every node.
			counts[items[0]] = total
			return total, counts, true
		}
	}
	for _, it := range items {
		cm := countedItemRE.FindStringSubmatch(it)
		if cm == nil {
			return 0, nil, false
		}
		n, err := strconv.Atoi(cm[1])
		if err != nil {
			return 0, nil, false
		}
		counts[cm[2]] += n
	}
	return total, counts, true
}

// splitCounted splits "8 A, 56 B" at ", " followed by a count, leaving commas
// inside a reason ("..., current pods number: 2, minMember of group: 4") and
// inside braces (taints such as "{key: a, b}") alone.
func splitCounted(body string) []string {
	var items []string
	depth, start := 0, 0
	for i := 0; i < len(body); i++ {
		switch body[i] {
		case '{', '[', '(':
			depth++
		case '}', ']', ')':
			if depth > 0 {
				depth--
			}
		case ',':
			if depth == 0 && separatorCount.MatchString(body[i:]) {
				items = append(items, strings.TrimSpace(body[start:i]))
				start = i + 2
			}
		}
	}
	return append(items, strings.TrimSpace(body[start:]))
}

// categoryPriority breaks ties in primaryCategory: the more specific and the
// more actionable for a GPU cluster first. GPU shortage leads because it is
// what the tuner can change; other is last because it says nothing.
var categoryPriority = []schedloop.WaitCategory{
	schedloop.WaitInsufficientGPU,
	schedloop.WaitGangIncomplete,
	schedloop.WaitQueueLimit,
	schedloop.WaitQuota,
	schedloop.WaitTopology,
	schedloop.WaitReserved,
	schedloop.WaitVolume,
	schedloop.WaitInsufficientCPU,
	schedloop.WaitTaintAffinity,
	schedloop.WaitPreemption,
	schedloop.WaitOther,
}

// primaryCategory picks the category that covers the most nodes, breaking
// ties by categoryPriority. A category covers at least as many nodes as its
// largest reason; summing its reasons would count a node short of both cpu
// and memory twice, since NodeResourcesFit reports every resource that does
// not fit.
func primaryCategory(counts map[string]int) schedloop.WaitCategory {
	if len(counts) == 0 {
		return schedloop.WaitOther
	}
	cover := map[schedloop.WaitCategory]int{}
	for r, n := range counts {
		c := categorize(r)
		if n > cover[c] {
			cover[c] = n
		} else if _, ok := cover[c]; !ok {
			cover[c] = n
		}
	}
	best, bestN := schedloop.WaitOther, -1
	for _, c := range categoryPriority {
		if n, ok := cover[c]; ok && n > bestN {
			best, bestN = c, n
		}
	}
	return best
}

// A rule maps reasons starting with (or, if contains, containing) a text to a
// category. Rules are tried in order; the first match wins.
type rule struct {
	text     string
	contains bool
	category schedloop.WaitCategory
}

var rules = []rule{
	// NodeResourcesFit: "Insufficient nvidia.com/gpu", MIG "Insufficient nvidia.com/mig-1g.10gb".
	{text: "Insufficient nvidia.com/", category: schedloop.WaitInsufficientGPU},
	{text: "Insufficient ", category: schedloop.WaitInsufficientCPU},
	{text: "Too many pods", category: schedloop.WaitInsufficientCPU},
	{text: "node(s) didn't have free ports", category: schedloop.WaitInsufficientCPU},
	{text: "node(s) did not have enough free storage", category: schedloop.WaitInsufficientCPU},
	{text: "node(s) exceed max volume count", category: schedloop.WaitInsufficientCPU},

	// scheduler-plugins coscheduling and the in-tree GangScheduling plugin.
	{text: "cannot find enough sibling pods", contains: true, category: schedloop.WaitGangIncomplete},
	{text: "rejected due to timeout after waiting", category: schedloop.WaitGangIncomplete},
	{text: "waiting for minCount pods from a gang", category: schedloop.WaitGangIncomplete},
	{text: "waiting for pods's pod group", category: schedloop.WaitGangIncomplete},
	{text: "waiting for composite pod group", category: schedloop.WaitGangIncomplete},
	{text: "minCount (", category: schedloop.WaitGangIncomplete},
	// GangScheduling's PreEnqueue before the scheduler has seen the gang's
	// composite pod group: it waits for that object as for its pod group.
	{text: "failed to build hierarchy snapshot: composite pod group object not found", category: schedloop.WaitGangIncomplete},
	{text: "pod with pgName: ", category: schedloop.WaitGangIncomplete},
	{text: "PodGroup ", category: schedloop.WaitGangIncomplete},

	{text: "node(s) didn't match pod topology spread constraints", category: schedloop.WaitTopology},

	{text: "node(s) had untolerated taint", category: schedloop.WaitTaintAffinity},
	{text: "node(s) had taint", category: schedloop.WaitTaintAffinity},
	{text: "node(s) didn't match Pod's node affinity/selector", category: schedloop.WaitTaintAffinity},
	{text: "node(s) didn't match pod affinity rules", category: schedloop.WaitTaintAffinity},
	{text: "node(s) didn't match pod anti-affinity rules", category: schedloop.WaitTaintAffinity},
	{text: "node(s) didn't satisfy existing pods anti-affinity rules", category: schedloop.WaitTaintAffinity},
	{text: "node(s) didn't match the requested node name", category: schedloop.WaitTaintAffinity},
	{text: "node(s) were unschedulable", category: schedloop.WaitTaintAffinity},
	{text: "node(s) had unknown conditions", category: schedloop.WaitTaintAffinity},

	// kube-scheduler's volume plugins (pkg/scheduler/framework/plugins/
	// volumebinding, volumerestrictions, volumezone) and VolumeBinding's
	// PreFilter errors. "volume node affinity conflict" is the wording of
	// releases before the PersistentVolume one.
	{text: "node(s) didn't find available persistent volumes to bind", category: schedloop.WaitVolume},
	{text: "node(s) didn't match PersistentVolume's node affinity", category: schedloop.WaitVolume},
	{text: "node(s) had volume node affinity conflict", category: schedloop.WaitVolume},
	{text: "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)", category: schedloop.WaitVolume},
	{text: "node(s) had no available disk", category: schedloop.WaitVolume},
	{text: "node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod access mode", category: schedloop.WaitVolume},
	{text: "node(s) had no available volume zone", category: schedloop.WaitVolume},
	{text: "pod has unbound immediate PersistentVolumeClaims", category: schedloop.WaitVolume},
	{text: "persistentvolumeclaim \"", category: schedloop.WaitVolume},
	{text: "waiting for ephemeral volume controller to create the persistentvolumeclaim", category: schedloop.WaitVolume},
	{text: "error getting PVC ", category: schedloop.WaitVolume},

	// Volcano's per-node reasons (pkg/scheduler/api/unschedule_info.go).
	{text: "node(s) resource fit failed", category: schedloop.WaitInsufficientCPU},
	{text: "node(s) pod number exceeded", category: schedloop.WaitInsufficientCPU},
	// KAI's per-node and per-domain reasons (pkg/scheduler/api/common_info/
	// pod_errors.go and job_errors.go). A node-group is a topology domain.
	{text: "node(s) didn't have enough resources: GPU", category: schedloop.WaitInsufficientGPU},
	{text: "node(s) didn't have enough of mig profile: ", category: schedloop.WaitInsufficientGPU},
	{text: "node(s) didn't have enough resources: ", category: schedloop.WaitInsufficientCPU},
	{text: "node-group(s) didn't have enough", category: schedloop.WaitTopology},
	{text: "Non-preemptible workload is over quota", category: schedloop.WaitQueueLimit},
	{text: "NonPreemptibleOverQuota", contains: true, category: schedloop.WaitQueueLimit},
	{text: "quota has reached the allowable limit of ", contains: true, category: schedloop.WaitQueueLimit},

	// The in-tree DynamicResources plugin (k8s.io/kubernetes
	// pkg/scheduler/framework/plugins/dynamicresources): a node whose devices
	// cannot satisfy the pod's claims, or whose devices are held by another
	// pod, is a device shortage; GPUs asked as nvidia.com/gpu but served by
	// DRA (the extended-resource mapping) say "cannot fit resource". A claim
	// already allocated on another node pins the pod there, as a selector
	// would. Claims not yet created, being deleted or being allocated are
	// lifecycle waits, left as other.
	{text: "cannot allocate all claims", category: schedloop.WaitInsufficientGPU},
	{text: "cannot fit resource", category: schedloop.WaitInsufficientGPU},
	{text: "cannot schedule extended resource claim", category: schedloop.WaitInsufficientGPU},
	{text: "resourceclaim in use", category: schedloop.WaitInsufficientGPU},
	{text: "resourceclaim not available on the node", category: schedloop.WaitTaintAffinity},

	{text: "waiting for the preemption for this pod", category: schedloop.WaitPreemption},
	{text: "No preemption victims found", category: schedloop.WaitPreemption},
	{text: "Preemption is not helpful", category: schedloop.WaitPreemption},
}

// categorize maps one reason to its wait category.
func categorize(reason string) schedloop.WaitCategory {
	if p, ok := reasons.Parse(reason); ok {
		switch p.Kind {
		case reasons.KindGangIncomplete:
			return schedloop.WaitGangIncomplete
		case reasons.KindGangNoRoom:
			if p.Short == reasons.ShortGPUs {
				return schedloop.WaitInsufficientGPU
			}
			return schedloop.WaitInsufficientCPU
		case reasons.KindQueueLimit:
			return schedloop.WaitQueueLimit
		case reasons.KindTopology:
			return schedloop.WaitTopology
		case reasons.KindReserved:
			return schedloop.WaitReserved
		}
	}
	for _, r := range rules {
		if r.contains && strings.Contains(reason, r.text) || !r.contains && strings.HasPrefix(reason, r.text) {
			return r.category
		}
	}
	return schedloop.WaitOther
}
