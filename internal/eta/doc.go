// Package eta answers "when will my job start?" and "what if …?": from a
// snapshot of the cluster (running jobs with what remains of their
// predicted run, pending jobs in the live order, the active profile) it
// runs internal/sim forward, repeatedly, drawing each job's run time from
// the predictor's measured error, and reports each pending job's start as
// a p10/p50/p90 interval with the nodes it would take and the jobs whose
// ends it waits for. A what-if is the same estimate of a snapshot changed
// by the question: a job added, a queue's limit changed, nodes drained.
//
// It is computation only: callers build snapshots from the apiserver or
// the database and store or serve the estimates. It must not grow
// placement, ordering or admission rules of its own: every start it
// reports is one the simulator, and so internal/scoring, decided.
package eta
