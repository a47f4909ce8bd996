// Package election is the room for leader election among replicas of a
// schedloop service, through a coordination.k8s.io Lease and client-go's
// leaderelection. It decides who is active; it must not know what the
// active replica does.
package election

import (
	"context"
	"fmt"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// Config names the Lease and this replica.
type Config struct {
	Namespace, Lease, Identity string
	// LeaseDuration, RenewDeadline and RetryPeriod default to 15s, 10s, 2s
	// (kube-controller-manager's values).
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// KeepOnCancel leaves the Lease held when ctx ends, as a replica that
	// crashed does, so that the others take over only once it expires
	// (tests of a crash); by default it is released at once.
	KeepOnCancel bool
}

// Run calls fn whenever this replica holds the Lease, until ctx ends. fn's
// context is cancelled when leadership is lost; Run then campaigns again.
func Run(ctx context.Context, client kubernetes.Interface, c Config, fn func(ctx context.Context)) error {
	if c.Namespace == "" || c.Lease == "" || c.Identity == "" {
		return fmt.Errorf("leader election: namespace, lease and identity are required (got %q, %q, %q)", c.Namespace, c.Lease, c.Identity)
	}
	if c.LeaseDuration == 0 {
		c.LeaseDuration, c.RenewDeadline, c.RetryPeriod = 15*time.Second, 10*time.Second, 2*time.Second
	}
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, c.Namespace, c.Lease, client.CoreV1(), client.CoordinationV1(),
		resourcelock.ResourceLockConfig{Identity: c.Identity})
	if err != nil {
		return fmt.Errorf("leader election lock %s/%s: %w", c.Namespace, c.Lease, err)
	}
	for ctx.Err() == nil {
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock: lock, LeaseDuration: c.LeaseDuration, RenewDeadline: c.RenewDeadline, RetryPeriod: c.RetryPeriod,
			ReleaseOnCancel: !c.KeepOnCancel, Name: c.Lease,
			Callbacks: leaderelection.LeaderCallbacks{OnStartedLeading: fn, OnStoppedLeading: func() {}},
		})
		if err != nil {
			return fmt.Errorf("leader election: %w", err)
		}
		le.Run(ctx) // returns when leadership is lost or ctx ends; try again
	}
	return nil
}
