// Package schedtest builds the kube-scheduler configuration that tests and
// benchmarks run on a harness cluster: schedloop's shipped profile beside
// the stock one, talking to the test apiserver.
package schedtest

import "fmt"

// WithStockProfile returns shipped (the text of deploy/scheduler-config.yaml)
// with the stock default-scheduler profile added, leader election off and
// the client pointed at kubeconfig with limits that never throttle a test.
//
// The stock profile keeps its plugins but must share the QueueSort plugin
// (kube-scheduler allows one for all profiles); for pods outside any gang
// its order is PrioritySort's.
func WithStockProfile(shipped, kubeconfig string) string {
	return shipped + fmt.Sprintf(`- schedulerName: default-scheduler
  plugins:
    queueSort:
      enabled:
      - name: SchedloopQueueSort
      disabled:
      - name: "*"
leaderElection:
  leaderElect: false
clientConnection:
  kubeconfig: %s
  qps: 5000
  burst: 5000
`, kubeconfig)
}
