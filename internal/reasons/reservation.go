package reasons

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// ReservationFormat is the note of the "Reserved" Event schedloop's
// scheduler records on the pod of the job holding the reservation, each
// time the reservation is planned anew: how many nodes it holds, its
// predicted start (RFC 3339, UTC) and the nodes, sorted and separated by
// spaces.
const ReservationFormat = "reserved %d node(s) from %s (predicted start): %s"

// Reservation is what a Reserved Event says.
type Reservation struct {
	Start time.Time
	Nodes []string
}

// String is the note written as ReservationFormat.
func (r Reservation) String() string {
	return fmt.Sprintf(ReservationFormat, len(r.Nodes), r.Start.UTC().Format(time.RFC3339), strings.Join(r.Nodes, " "))
}

var reservationRE = regexp.MustCompile(`^reserved (\d+) node\(s\) from (\S+) \(predicted start\): (\S+(?: \S+)*)$`)

// ParseReservation reads a note written by Reservation.String. ok is false
// for any other text, for a start that is not RFC 3339, and when the count
// does not match the nodes listed.
func ParseReservation(s string) (r Reservation, ok bool) {
	m := reservationRE.FindStringSubmatch(s)
	if m == nil {
		return Reservation{}, false
	}
	n, err := strconv.Atoi(m[1])
	if err != nil {
		return Reservation{}, false
	}
	start, err := time.Parse(time.RFC3339, m[2])
	if err != nil {
		return Reservation{}, false
	}
	nodes := strings.Split(m[3], " ")
	if len(nodes) != n {
		return Reservation{}, false
	}
	return Reservation{Start: start.UTC(), Nodes: nodes}, true
}
