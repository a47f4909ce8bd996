// Package events turns what the cluster says about scheduling into structured
// history: kube-scheduler's FailedScheduling messages become a node total,
// node counts per reason and one wait category per attempt.
//
// It reads text and Kubernetes objects; it must not decide placement (that is
// internal/scoring) nor write to the database (the store does). It must not
// import the scheduler plugins: the reasons they emit are shared through
// internal/reasons, which both sides import.
package events
