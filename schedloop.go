// Package schedloop holds the domain types every part of schedloop shares: the
// cluster inventory (nodes, GPUs), the workload (jobs, pods), what the scheduler
// said about them (attempts, wait reasons, events), GPU telemetry samples and
// tuned profiles.
//
// This package is the centre of the dependency graph: it imports no database,
// Kubernetes client or HTTP code. Adapters (the store, informers, DCGM sources)
// translate between these types and the outside systems.
package schedloop

import "time"

// GPUResourceName is the extended resource the NVIDIA device plugin advertises.
const GPUResourceName = "nvidia.com/gpu"

// MIGResourcePrefix starts the MIG instance resources of the NVIDIA device
// plugin's mixed strategy: the profile follows (nvidia.com/mig-1g.10gb).
const MIGResourcePrefix = "nvidia.com/mig-"

// Node is one machine of the cluster inventory.
type Node struct {
	Name string
	// Labels are the node's Kubernetes labels as last observed.
	Labels map[string]string
	// Topology maps each configured topology level key (for example
	// "topology.schedloop.io/rack") to this node's value at that level.
	Topology map[string]string
	GPUModel string
	GPUCount int
	CPUMilli int64
	// MemoryMiB is the node's allocatable memory.
	MemoryMiB int64
	Ready     bool
	FirstSeen time.Time
	LastSeen  time.Time
}

// GPU is one physical GPU (or MIG instance) on a node.
type GPU struct {
	UUID         string
	Node         string
	Index        int
	Model        string
	NVLinkDomain string
	// MIGProfile is empty for a whole GPU, else the MIG profile such as "1g.10gb".
	MIGProfile string
	// Instance is empty for a whole GPU, else the GPU instance ID of a MIG
	// partition (dcgm-exporter's GPU_I_ID). Instances share their GPU's UUID
	// and index, so a device is (UUID, Instance).
	Instance string
	// MIGUUID is a MIG instance's own MIG- UUID where its source names it:
	// NVIDIA's DRA driver publishes it without an Instance, and
	// dcgm-exporter's dra_mig_device_uuid label with one, which is how
	// the inventory tells both are the same instance.
	MIGUUID string
}

// MaxGangMembers is the largest gang schedloop accepts: a PodGroup's
// minMember (the CRD's maximum), a stored job's member count, and a trace
// job's gang size. The simulator and the tuner allocate per member, so an
// unbounded count from one PodGroup or one trace row would take them down;
// ten thousand members is beyond any cluster schedloop serves.
const MaxGangMembers = 10_000

// JobKind says whether a job is a gang (PodGroup) or a lone pod.
type JobKind string

const (
	JobKindGang JobKind = "gang"
	JobKindPod  JobKind = "pod"
)

// Phase is the lifecycle phase of a job or pod.
type Phase string

const (
	PhasePending   Phase = "Pending"
	PhaseRunning   Phase = "Running"
	PhaseSucceeded Phase = "Succeeded"
	PhaseFailed    Phase = "Failed"
	PhaseDeleted   Phase = "Deleted"
)

// Job is the unit JCT is measured on: a gang of pods, or a single pod.
// JCT = queueing (Created → Admitted) + running (Admitted → Finished).
type Job struct {
	UID       string
	Namespace string
	Name      string
	Kind      JobKind
	Queue     string
	Priority  int32
	// MinMember is the gang's all-or-nothing size; 1 for a lone pod.
	MinMember int
	// GPUsPerMember counts whole GPUs each member requests.
	GPUsPerMember int
	// GPUMilliPerMember is the share of one GPU (1..1000) a GPU-sharing
	// member asks for; 0 when members request whole GPUs.
	GPUMilliPerMember int
	// CPUMilliPerMember and MemoryMiBPerMember are each member's CPU
	// (milli-cores) and memory (MiB) requests; GPUModels the GPU models a
	// member may run on (empty: any).
	CPUMilliPerMember  int64
	MemoryMiBPerMember int64
	GPUModels          []string
	Created            time.Time
	// FirstScheduled is when the first member was bound; Admitted is when
	// MinMember members were bound (the gang could start).
	FirstScheduled time.Time
	Admitted       time.Time
	Started        time.Time
	Finished       time.Time
	// LastRunBegan is when the job's last run began: MinMember of its
	// members that were not evicted bound (Admitted for a job never
	// evicted; zero when no such run). A job evicted and run again took
	// Finished - LastRunBegan to run once; Finished - Admitted also holds
	// the lost run and the second wait. Read by history queries only
	// (JobHistory); not a stored column.
	LastRunBegan time.Time
	Phase        Phase
	// Deleted is when the gang's group object was deleted (zero while it
	// exists, and for a lone pod's job): no member can join the job after
	// that, so a job whose members were all evicted ends then.
	Deleted time.Time
}

// Pod is one member of a job as the cluster saw it.
type Pod struct {
	UID           string
	Namespace     string
	Name          string
	JobUID        string
	Queue         string
	Priority      int32
	SchedulerName string
	GPUs          int
	GPUMilli      int
	// CPUMilli and MemoryMiB are the pod's requests (milli-cores, MiB);
	// GPUModels the GPU models it may run on (empty: any).
	CPUMilli  int64
	MemoryMiB int64
	GPUModels []string
	Node      string
	// GPUUUIDs are the devices the pod was given, when attribution knows them.
	GPUUUIDs  []string
	Created   time.Time
	Scheduled time.Time
	Started   time.Time
	Finished  time.Time
	Phase     Phase
	// Evicted: the pod was deleted by an eviction (it carried the
	// DisruptionTarget condition, podspec.Evicted). Its job is not over:
	// its controller puts a new pod in its place.
	Evicted bool
}

// WaitCategory groups scheduler reasons into the classes the dashboards and the
// tuner reason about.
type WaitCategory string

const (
	WaitInsufficientGPU WaitCategory = "insufficient_gpu"
	WaitInsufficientCPU WaitCategory = "insufficient_other"
	WaitGangIncomplete  WaitCategory = "gang_incomplete"
	WaitQueueLimit      WaitCategory = "queue_limit"
	WaitTopology        WaitCategory = "topology"
	WaitTaintAffinity   WaitCategory = "taint_affinity"
	WaitPreemption      WaitCategory = "preemption"
	// WaitQuota: an admission system in front of the scheduler (Kueue) holds
	// the job until its ClusterQueue, or the cohort it borrows from, has
	// unused quota. Capacity may be free meanwhile: the wait is policy, not
	// shortage, which is why it is kept apart from the capacity categories.
	WaitQuota WaitCategory = "quota"
	// WaitVolume: the pod's volumes cannot be bound or reached from any node
	// (unbound PersistentVolumeClaims, volume node affinity, zones).
	WaitVolume WaitCategory = "volume"
	// WaitReserved: the nodes the pod fits are reserved for a job ahead of
	// it in the order (reservation and backfill) and the pod is predicted
	// to run past the reservation's start. Like quota, a wait of policy:
	// the GPUs may be idle meanwhile, held for the job ahead.
	WaitReserved WaitCategory = "reserved"
	WaitOther    WaitCategory = "other"
)

// AttemptResult is the outcome of one scheduling attempt for a pod.
type AttemptResult string

const (
	AttemptScheduled     AttemptResult = "scheduled"
	AttemptUnschedulable AttemptResult = "unschedulable"
	AttemptWaiting       AttemptResult = "waiting"
	AttemptPreempted     AttemptResult = "preempted"
	AttemptError         AttemptResult = "error"
)

// SchedulingAttempt is one decision the scheduler reported for a pod, with
// its message broken into counts per reason, e.g. "0/64 nodes are available:
// 8 Insufficient nvidia.com/gpu, ..." → {"Insufficient nvidia.com/gpu": 8}.
type SchedulingAttempt struct {
	// Key de-duplicates attempts seen twice (for example after a re-list):
	// the source event's UID plus its count.
	Key        string
	PodUID     string
	At         time.Time
	Result     AttemptResult
	Category   WaitCategory
	TotalNodes int
	Reasons    map[string]int
	Message    string
}

// Event is a Kubernetes Event kept after the apiserver has dropped it.
type Event struct {
	UID          string
	Namespace    string
	InvolvedKind string
	InvolvedName string
	InvolvedUID  string
	Reason       string
	Type         string
	Message      string
	Source       string
	Count        int
	FirstSeen    time.Time
	LastSeen     time.Time
}

// Preemption is one pod evicted by schedloop's preemption, with its cause
// as the scheduler recorded it (the "Preempted" Event on the victim).
type Preemption struct {
	// VictimUID is the evicted pod; a pod is evicted at most once.
	VictimUID string
	Namespace string
	VictimPod string
	// VictimJob is namespace/name of the victim's job (its gang, or the
	// pod itself when it runs alone): the whole job was evicted.
	VictimJob string
	// Preemptor is namespace/name of the pod the victim made room for,
	// PreemptorPriority its priority.
	Preemptor         string
	PreemptorPriority int32
	// Node is the node the preemptor was nominated to.
	Node string
	// GPUHours is what the victim's whole job lost: GPUs held × time run.
	GPUHours float64
	At       time.Time
}

// KueueWorkload is a Kueue Workload as the collector saw it: the unit Kueue
// admits, one per job in front of the scheduler. Its wait for quota starts
// at CreatedAt, before any pod of the job reaches a scheduler.
type KueueWorkload struct {
	UID       string
	Namespace string
	Name      string
	// LocalQueue is spec.queueName; ClusterQueue is where it was (last)
	// admitted, empty while it never was.
	LocalQueue   string
	ClusterQueue string
	// Flavors maps each resource of its pod sets to the ResourceFlavor the
	// last admission assigned ("nvidia.com/gpu" -> "h100"); empty when not
	// admitted.
	Flavors   map[string]string
	CreatedAt time.Time
	// Conditions are the admission conditions as observed, one per change:
	// a condition type seen again with another status, reason or
	// transition time is a new entry, so the history of admissions,
	// evictions and preemptions is kept, not only the latest.
	Conditions []KueueCondition
}

// KueueCondition is one observed state of a Workload condition
// (QuotaReserved, Admitted, Evicted, Preempted, Requeued, Finished).
type KueueCondition struct {
	Type    string
	Status  string // "True" or "False"
	Reason  string
	Message string
	At      time.Time // lastTransitionTime
	// Category is the wait it stands for (events.ParseWorkloadCondition);
	// WaitOther also for a condition that is not a wait.
	Category WaitCategory
}

// GPUSample is one reading of one GPU, in dcgm-exporter's field vocabulary.
// Ratios are 0..1 (DCGM_FI_PROF_*), GPUUtil is a percentage (DCGM_FI_DEV_GPU_UTIL).
type GPUSample struct {
	Time           time.Time
	GPUUUID        string
	Node           string
	GPUIndex       int
	PodNamespace   string
	PodName        string
	Container      string
	GPUUtil        float64
	GrEngineActive float64
	SMActive       float64
	FBUsedMiB      float64
	PowerWatts     float64
	// GPUInstance and GPUInstanceProfile name the MIG partition a sample
	// reads (dcgm-exporter's GPU_I_ID and GPU_I_PROFILE); both are empty
	// for a whole GPU. ComputeShare is the partition's share of its GPU's
	// compute slices (MIGComputeShare); 0 stands for a whole GPU, as 1 does.
	GPUInstance        string
	GPUInstanceProfile string
	ComputeShare       float64
	// MIGDeviceUUID is the instance's own MIG- UUID where the source names
	// it: dcgm-exporter does, as dra_mig_device_uuid, for an instance a
	// ResourceClaim holds. Empty otherwise, and always for a whole GPU. It
	// joins the sample to the claim holding that instance; nothing stores
	// it, the instance being GPUUUID and GPUInstance.
	MIGDeviceUUID string
}

// ProfileStatus is where a tuned profile is in its life.
type ProfileStatus string

const (
	ProfileProposed   ProfileStatus = "proposed"
	ProfileApplied    ProfileStatus = "applied"
	ProfileRolledBack ProfileStatus = "rolled_back"
	ProfileRejected   ProfileStatus = "rejected"
	ProfileSuperseded ProfileStatus = "superseded"
)

// QueueLimit caps what one queue may hold at once.
type QueueLimit struct {
	MaxGPUs        int `json:"maxGPUs"`
	MaxRunningGang int `json:"maxRunningGangs,omitempty"`
}

// Profile is a set of scheduler parameters with the evidence that chose it.
type Profile struct {
	ID                 int64
	Name               string
	Status             ProfileStatus
	Weights            map[string]float64
	QueueLimits        map[string]QueueLimit
	GangTimeoutSeconds int
	// The queue policies, in the units of the profile document; each zero
	// means what the document's absent field means (see scoring.Params).
	Order                       string
	StarvationBoundSeconds      int
	Reservation                 bool
	ReservationThresholdSeconds int
	PreemptMinRunTimeSeconds    int
	// Evidence, Predicted and Measured are free-form JSON documents written by
	// the tuner (replay results, confidence intervals, held-out comparison).
	Evidence  map[string]any
	Predicted map[string]float64
	Measured  map[string]float64
	ParentID  int64
	Reason    string
	Created   time.Time
	Applied   time.Time
}

// KueueClusterQueue is a Kueue ClusterQueue's spec and the use Kueue last
// reported for it, as the collector saw it. Quantities are in thousandths of
// the resource's unit (milli-GPUs, millicores), so CPU quota keeps its
// precision; a GPU quota of 16 is 16000.
type KueueClusterQueue struct {
	Name string
	// Cohort is spec.cohortName; "" is a ClusterQueue that neither borrows
	// nor lends.
	Cohort string
	// FairWeight is spec.fairSharing.weight; 0 when unset, which Kueue reads
	// as 1.
	FairWeight float64
	// QueueingStrategy is spec.queueingStrategy (BestEffortFIFO when unset).
	QueueingStrategy string
	// Preemption is spec.preemption's policies, Kueue's names ("Never",
	// "LowerPriority", "Any"); "" where unset, which Kueue defaults to
	// Never for all three.
	ReclaimWithinCohort string
	BorrowWithinCohort  string
	WithinClusterQueue  string
	// WhenCanBorrow, WhenCanPreempt and FungibilityPreference are
	// spec.flavorFungibility's whenCanBorrow, whenCanPreempt and
	// preference, Kueue's names; "" where unset, which Kueue defaults to
	// MayStopSearch, TryNextFlavor and BorrowingOverPreemption.
	WhenCanBorrow         string
	WhenCanPreempt        string
	FungibilityPreference string
	// Quotas are in spec order (resource groups, their flavours, each
	// flavour's resources): the order Kueue tries flavours in.
	Quotas []KueueQuota
	// ObservedAt is when the collector last saw the ClusterQueue.
	ObservedAt time.Time
}

// KueueQuota is one flavour-resource of a ClusterQueue: its nominal quota,
// borrowing and lending limits (nil: no limit, as in Kueue's API), and what
// Kueue's status last said was reserved and borrowed of it.
type KueueQuota struct {
	Flavor         string
	Resource       string
	Nominal        int64
	BorrowingLimit *int64
	LendingLimit   *int64
	Reserved       int64
	Borrowed       int64
}

// ClaimState is where a ResourceClaim is in its life, as the collector saw it.
type ClaimState string

const (
	ClaimPending     ClaimState = "pending"     // not allocated
	ClaimAllocated   ClaimState = "allocated"   // allocated, reserved for no consumer
	ClaimReserved    ClaimState = "reserved"    // allocated and reserved for a consumer
	ClaimDeallocated ClaimState = "deallocated" // its allocation was released
	ClaimDeleted     ClaimState = "deleted"
)

// ResourceClaim is a DRA ResourceClaim as the collector saw it. Each time
// is the first it was seen in that state; zero when it never was.
type ResourceClaim struct {
	UID, Namespace, Name string
	State                ClaimState
	// Node is where its devices are (the allocation's node selector names
	// it, or the devices' pool); empty while not allocated.
	Node string
	// ReservedFor are the UIDs of the pods it is reserved for.
	ReservedFor []string
	// Devices are its allocation's devices as driver/pool/device, and
	// DeviceUUIDs their UUIDs as the slices published them (a MIG
	// instance's own MIG- UUID). LostDevices are those that left their
	// slices while the claim held them. A deallocated claim keeps the
	// devices it last held.
	Devices, DeviceUUIDs, LostDevices []string
	// GPUs and MIGInstances are what it asks of NVIDIA's driver.
	GPUs, MIGInstances                                           int
	CreatedAt, AllocatedAt, ReservedAt, DeallocatedAt, DeletedAt time.Time
}

// DRADevice is one device a ResourceSlice publishes. Empty strings and a
// zero memory mean the slice did not say; Unknown are the attributes and
// capacities schedloop does not read, and Problems each attribute that was
// missing or of the wrong kind, naming it and the value.
type DRADevice struct {
	Driver, Pool, Device, Node string
	Type, UUID, ParentUUID     string
	Product, Profile, Clique   string
	MemoryBytes                int64
	Unknown, Problems          []string
}

// KueueQuotaChange moves one ClusterQueue's nominal quota of one
// flavour-resource, in thousandths of the unit.
type KueueQuotaChange struct {
	ClusterQueue string `json:"cluster_queue"`
	Flavor       string `json:"flavor"`
	Resource     string `json:"resource"`
	From         int64  `json:"from"`
	To           int64  `json:"to"`
}

// KueueQuotaRecommendation is a proposal to move nominal quota between the
// ClusterQueues of a cohort, with the evidence of replaying the same history
// behind Kueue before and after: the jobs' total time waiting for quota
// (Kueue's replay alone) and their mean wait to start (quota and placement).
// Patch is what an operator runs to apply it; schedloop never does. No
// Changes: the replay found no move that helps, and Patch is empty.
type KueueQuotaRecommendation struct {
	ID                                int64
	Created                           time.Time
	Changes                           []KueueQuotaChange
	QuotaWaitBeforeS, QuotaWaitAfterS float64
	MeanWaitBeforeS, MeanWaitAfterS   float64
	Jobs                              int
	Patch                             string
}
