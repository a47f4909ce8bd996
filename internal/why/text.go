package why

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// WriteText prints the story for a terminal: who, the wait breakdown with
// bars, the timeline and the attempts (the last few when there are many).
func (s Story) WriteText(w io.Writer, maxAttempts int) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s/%s (uid %s)", s.Kind, s.Namespace, s.Name, s.UID)
	if s.Queue != "" {
		fmt.Fprintf(&b, "  queue %s", s.Queue)
	}
	if s.GPUs > 0 {
		fmt.Fprintf(&b, "  %d GPUs", s.GPUs)
	}
	if s.Node != "" {
		fmt.Fprintf(&b, "  on %s", s.Node)
	}
	fmt.Fprintf(&b, "  %s\n", s.Phase)
	fmt.Fprintf(&b, "created %s", stamp(s.Created))
	if s.Scheduled != nil {
		fmt.Fprintf(&b, ", started after %s", dur(s.Scheduled.Sub(s.Created).Seconds()))
	}
	if s.Finished != nil {
		fmt.Fprintf(&b, ", finished %s", stamp(*s.Finished))
	}
	b.WriteString("\n")
	if s.Gate != "" {
		fmt.Fprintf(&b, "the gang started when its last member, %s, was bound; its wait is the job's\n", s.Gate)
	}

	fmt.Fprintf(&b, "\nwaited %s", dur(s.WaitSeconds))
	if s.RunSeconds > 0 {
		fmt.Fprintf(&b, ", ran %s", dur(s.RunSeconds))
	}
	b.WriteString("\n")
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	for _, r := range s.Breakdown {
		fmt.Fprintf(tw, "  %s\t%s\t%3.0f%%\t%s\n", r.Title, dur(r.Seconds), 100*r.Share, strings.Repeat("█", int(r.Share*30+0.5)))
	}
	tw.Flush()

	b.WriteString("\ntimeline:\n")
	tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	for _, iv := range s.Timeline {
		fmt.Fprintf(tw, "  %s\t+%s\t%s\t%s\n", stamp(iv.Start), dur(iv.Start.Sub(s.Created).Seconds()), dur(iv.Seconds), iv.Label)
	}
	tw.Flush()

	if len(s.Members) > 0 {
		b.WriteString("\nmembers:\n")
		tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		for _, m := range s.Members {
			fmt.Fprintf(tw, "  %s\t%s\twaited %s\t%s\n", m.Name, m.Phase, dur(m.WaitSeconds), m.Node)
		}
		tw.Flush()
	}

	if len(s.Preemptions) > 0 {
		b.WriteString("\npreemptions:\n")
		tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		for _, p := range s.Preemptions {
			what := fmt.Sprintf("evicted %s to start this", p.Pod)
			if p.Role == "victim" {
				what = fmt.Sprintf("%s evicted for %s (priority %d)", p.Pod, p.Preemptor, p.Priority)
			}
			fmt.Fprintf(tw, "  %s\t%s\ton %s\tjob %s lost %.2f GPU-hours\n", stamp(p.At), what, p.Node, p.Job, p.GPUHours)
		}
		tw.Flush()
	}

	fmt.Fprintf(&b, "\nscheduling attempts: %d\n", len(s.Attempts))
	shown := s.Attempts
	if maxAttempts > 0 && len(shown) > maxAttempts {
		fmt.Fprintf(&b, "  (%d earlier not shown)\n", len(shown)-maxAttempts)
		shown = shown[len(shown)-maxAttempts:]
	}
	tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	for _, a := range shown {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", stamp(a.At), a.Pod, a.Result, Label(a.Category, a.Reasons, a.Nodes, a.Message))
	}
	tw.Flush()

	if len(s.Activity) > 0 {
		var active float64
		var idle int
		for _, a := range s.Activity {
			active += a.Active
			idle += a.IdleMinutes
		}
		fmt.Fprintf(&b, "\nGPU activity while running: mean %.0f%%, %s of GPU time idle (below threshold)\n",
			100*active/float64(len(s.Activity)), dur(float64(idle)*60))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func stamp(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05Z") }

// dur prints seconds as 1h02m03s, 4m05s or 6s.
func dur(sec float64) string {
	d := time.Duration(sec * float64(time.Second)).Round(time.Second)
	h, m, s := int(d.Hours()), int(d.Minutes())%60, int(d.Seconds())%60
	switch {
	case h > 0:
		return fmt.Sprintf("%dh%02dm%02ds", h, m, s)
	case m > 0:
		return fmt.Sprintf("%dm%02ds", m, s)
	}
	return fmt.Sprintf("%ds", s)
}
