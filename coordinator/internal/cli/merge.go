package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/supervisorhq/supervisor/coordinator/internal/api"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/protocol/eventlog"
)

// ExitMergeFailed: the merge failed (a conflict, local changes in the
// target's checkout in the way, a missing target …); neither branch
// changed.
const ExitMergeFailed = 6

func newMerge() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "merge WF",
		Short: "Merge a succeeded workflow's branch into a branch of the submitting repository",
		Long: `merge merges branch supervisor/<WF> into --into (default: the workflow's
merge_into, or else the branch it was submitted from) of the repository it was
submitted from, one merge at a time per repository and branch across the
fleet: a fast-forward when the target has not moved since, otherwise a merge
commit. A target no worktree has checked out is moved with git plumbing alone,
touching no working tree or index. A target that is checked out moves as
"git merge --ff-only" would move it there, files and index included; if that
would overwrite uncommitted changes or untracked files, git refuses and nothing
changes: commit or stash them and merge again.

Only a succeeded workflow can be merged. Merging again into the same branch
changes nothing. A conflict fails the merge with the conflicting paths and
leaves both branches as they were (exit 6); the outcome is recorded in the
workflow's events and shown by status. -o json prints the merge as JSON.`,
		Args: cobra.ExactArgs(1),
		RunE: clientRunE("merge", func(ctx context.Context, e *env, client *api.Client, args []string) error {
			format, err := formatOf(e)
			if err != nil {
				return err
			}
			into := e.v.GetString("into")
			if into != "" {
				if err := protocol.CheckBranchName(into); err != nil {
					return exitf(ExitUsage, "--into: %v", err)
				}
			}
			by := e.v.GetString("as")
			if by == "" {
				by = currentUser()
			}
			s, err := client.Merge(ctx, api.MergeRequest{WorkflowID: args[0], Into: into, By: by})
			if err != nil {
				return apiErr(err)
			}
			// Another merge of the same branch held the lock: the
			// coordinator goes on trying; wait for the outcome while
			// --timeout lasts.
			for s.Merge != nil && s.Merge.Status == "requested" {
				select {
				case <-ctx.Done():
					return exitf(ExitRunning, "the merge of %s into %s waits for another merge of that branch; "+
						"the coordinator will do it (coordinator status %s)", s.ID, s.Merge.Into, s.ID)
				case <-time.After(500 * time.Millisecond):
				}
				if s, err = client.Status(ctx, args[0]); err != nil {
					return apiErr(err)
				}
			}
			if format == "json" {
				if err := writeJSON(e.out, s.Merge); err != nil {
					return err
				}
			} else {
				printMerge(e.out, s)
			}
			if m := s.Merge; m != nil && m.Status == "failed" {
				return mergeFailed(s)
			}
			return nil
		}),
	}
	fs := cmd.Flags()
	fs.String("into", "", "the branch to merge into (default: merge_into, or the branch the workflow was submitted from)")
	fs.String("as", "", "who merges (default: the OS user)")
	fs.StringP("output", "o", "table", "output format: table or json")
	return cmd
}

// mergeFailed is the exit error of a failed merge.
func mergeFailed(s api.WorkflowSummary) error {
	m := s.Merge
	msg := fmt.Sprintf("merge of %s into %s failed: %s", s.Branch, m.Into, m.Reason)
	if len(m.Conflicts) > 0 {
		msg += "; conflicting paths: " + strings.Join(m.Conflicts, ", ")
	}
	return exitf(ExitMergeFailed, "%s", msg)
}

// printMerge says how a workflow's latest merge went.
func printMerge(w io.Writer, s api.WorkflowSummary) {
	m := s.Merge
	if m == nil {
		return
	}
	switch m.Status {
	case "merged":
		how := "merge commit " + short(m.Result)
		switch {
		case m.UpToDate:
			how = "already there, unchanged at " + short(m.Result)
		case m.FastForward:
			how = "fast-forward to " + short(m.Result)
		}
		fmt.Fprintf(w, "merged %s into %s: %s\n", s.Branch, m.Into, how)
	case "failed":
		fmt.Fprintf(w, "merge of %s into %s failed: %s\n", s.Branch, m.Into, m.Reason)
		for _, p := range m.Conflicts {
			fmt.Fprintf(w, "  conflict: %s\n", p)
		}
	default:
		fmt.Fprintf(w, "merge of %s into %s: %s\n", s.Branch, m.Into, m.Status)
	}
}

// mergeLine is status's one line about a workflow's merge ("" if none).
func mergeLine(s api.WorkflowSummary) string {
	m := s.Merge
	if m == nil {
		if s.AutoMerge && !s.Status.Terminal() {
			into := s.MergeInto
			if into == "" {
				into = s.BaseBranch
			}
			return fmt.Sprintf("auto_merge into %s once it succeeds", into)
		}
		return ""
	}
	who := m.By
	if m.Auto {
		who = "auto_merge"
	}
	switch m.Status {
	case "merged":
		how := "merge commit"
		switch {
		case m.UpToDate:
			how = "already there"
		case m.FastForward:
			how = "fast-forward"
		}
		return fmt.Sprintf("into %s at %s (%s, by %s)", m.Into, short(m.Result), how, who)
	case "failed":
		line := fmt.Sprintf("into %s failed: %s", m.Into, m.Reason)
		if len(m.Conflicts) > 0 {
			line += " (" + strings.Join(m.Conflicts, ", ") + ")"
		}
		return line
	}
	return fmt.Sprintf("into %s %s by %s", m.Into, m.Status, who)
}

// mergeEventLine is watch's line for a merge event.
func mergeEventLine(ev eventlog.Event) string {
	switch b := ev.Body.(type) {
	case eventlog.WorkflowMergeRequested:
		who := "by " + b.By
		if b.Auto {
			who = "(auto_merge)"
		}
		return fmt.Sprintf("merge into %s requested %s", b.Into, who)
	case eventlog.WorkflowMerged:
		how := "merge commit"
		switch {
		case b.UpToDate:
			how = "already there"
		case b.FastForward:
			how = "fast-forward"
		}
		return fmt.Sprintf("merged into %s at %s (%s)", b.Into, short(b.Commit), how)
	case eventlog.WorkflowMergeFailed:
		line := fmt.Sprintf("merge into %s failed: %s", b.Into, b.Reason)
		if len(b.Conflicts) > 0 {
			line += " (conflicts: " + strings.Join(b.Conflicts, ", ") + ")"
		}
		return line
	}
	return string(ev.Type())
}

// mergeOutcome reports whether ev ends a merge watch follows, and the
// exit error it calls for.
func mergeOutcome(ev eventlog.Event, branch string) (bool, error) {
	switch b := ev.Body.(type) {
	case eventlog.WorkflowMerged:
		return true, nil
	case eventlog.WorkflowMergeFailed:
		return true, mergeFailed(api.WorkflowSummary{Branch: branch, Merge: &api.MergeSummary{Into: b.Into,
			Reason: b.Reason, Conflicts: b.Conflicts}})
	}
	return false, nil
}
