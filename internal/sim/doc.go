// Package sim is the tuner's discrete-event cluster simulator: jobs arrive,
// wait in a priority-ordered queue, are admitted under queue limits, placed
// (gangs all-or-nothing, optionally holding partial reservations for a gang
// timeout), run for their duration and leave; higher-priority pods may
// preempt lower-priority ones.
//
// Every placement decision is made by internal/scoring (Fit, SelectNode,
// Scorer, PlanGang/PlaceGang, QueueAdmits, PreemptOnNode), the same code the
// scheduler plugins call, so a replay predicts what the live scheduler does.
// This package only keeps time and state: it must not grow placement rules of
// its own. It does no I/O.
package sim
