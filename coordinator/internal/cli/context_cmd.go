package cli

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/supervisorhq/supervisor/shared/contextpack"
	"github.com/supervisorhq/supervisor/shared/gitexec"
	"github.com/supervisorhq/supervisor/shared/workspace"
)

func newContext() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "context",
		Short: "List the context strategies and try one on a local repository",
		Long: `context lists the context strategies tasks may name (configs/context, then the
user's --user-context directory), and packs one from a local repository as a
worker would before an agent runs, so a strategy and a budget can be tried
without running a workflow. See docs/context-packing.md.`,
	}
	cmd.AddCommand(newContextList(), newContextPack())
	return cmd
}

func newContextList() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the context strategies: name, budget, parts by priority, file",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			e, err := load(cmd, "context")
			if err != nil {
				return err
			}
			cat, err := e.loadStrategies()
			if err != nil {
				return err
			}
			if len(cat.Names()) == 0 {
				fmt.Fprintln(e.out, "no context strategies found (configs/context, --builtin-context, --user-context)")
				return nil
			}
			tw := tabwriter.NewWriter(e.out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "STRATEGY\tBUDGET\tPARTS (MOST IMPORTANT FIRST)\tFILE")
			for _, name := range cat.Names() {
				s, _ := cat.Lookup(name)
				fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", name, s.TokenBudget, strings.Join(s.PriorityOrder, ", "), cat.File(name))
			}
			return tw.Flush()
		},
	}
}

func newContextPack() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "pack STRATEGY",
		Short: "Pack a strategy's context from a local repository and print it (or its manifest with -o json)",
		Long: `pack gathers STRATEGY's parts from the repository at --repo as a worker does
from a job's workspace: tracked files only, as they are in the working tree;
the diff and the changed files against --base (default HEAD); secrets
redacted; whole parts dropped from the lowest priority up until the context
and --task fit the budget. It prints the prompt an agent would get, and a
one-line summary on standard error; -o json prints the manifest instead. A
context whose kept parts do not fit exits 65.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			e, err := load(cmd, "context")
			if err != nil {
				return err
			}
			format := e.v.GetString("output")
			if format != "text" && format != "json" {
				return exitf(ExitUsage, "-o %q: want text or json", format)
			}
			cat, err := e.loadStrategies()
			if err != nil {
				return err
			}
			flags := cmd.Flags()
			targets, _ := flags.GetStringArray("target")
			interfaces, _ := flags.GetStringArray("interface")
			budget, _ := flags.GetInt("budget")
			spec, err := cat.Spec(args[0], budget, targets, interfaces)
			if err != nil {
				return &ExitError{Code: ExitUsage, Err: err}
			}
			ctx, stop := signalContext()
			defer stop()
			repo, err := filepath.Abs(e.v.GetString("repo"))
			if err != nil {
				return &ExitError{Code: ExitUsage, Err: err}
			}
			top, err := gitexec.Runner{Dir: repo}.Text(ctx, "rev-parse", "--show-toplevel")
			if err != nil {
				return &ExitError{Code: ExitUsage, Err: fmt.Errorf("--repo %s: not a git worktree: %w", repo, err)}
			}
			base, err := workspace.ResolveCommit(ctx, top, e.v.GetString("base"))
			if err != nil {
				return &ExitError{Code: ExitUsage, Err: err}
			}
			task := e.v.GetString("task")
			packed, err := contextpack.Pack(ctx, contextpack.Request{Dir: top, Git: gitexec.Runner{Dir: top}, Base: base,
				Spec: *spec, Task: task})
			var tooLarge *contextpack.TooLargeError
			var invalid *contextpack.DefinitionError
			switch {
			case errors.As(err, &tooLarge), errors.As(err, &invalid):
				return &ExitError{Code: ExitInvalid, Err: err}
			case err != nil:
				return err
			}
			if format == "json" {
				return writeJSON(e.out, packed.Manifest)
			}
			fmt.Fprint(e.out, packed.Prompt(task))
			if !strings.HasSuffix(task, "\n") {
				fmt.Fprintln(e.out)
			}
			m := packed.Manifest
			var dropped []string
			for _, p := range m.Parts {
				if !p.Included && p.Reason != "empty" {
					dropped = append(dropped, p.Name)
				}
			}
			fmt.Fprintf(e.errOut, "coordinator: %s: %d of %d tokens (%s); dropped: %s\n", m.Strategy, m.Tokens, m.Budget, m.Encoding,
				orNone(dropped))
			return nil
		},
	}
	cmd.Flags().String("repo", ".", "the repository (a git worktree) to pack from")
	cmd.Flags().String("base", "HEAD", "the revision the diff and the changed files are measured against")
	cmd.Flags().StringArray("target", nil, "a glob $TARGET stands for (repeatable)")
	cmd.Flags().StringArray("interface", nil, "a glob $INTERFACES stands for (repeatable)")
	cmd.Flags().Int("budget", 0, "token budget (default: the strategy's)")
	cmd.Flags().String("task", "(the task)", "the task's prompt, counted against the budget")
	cmd.Flags().StringP("output", "o", "text", "output format: text (the prompt) or json (the manifest)")
	return cmd
}

func orNone(list []string) string {
	if len(list) == 0 {
		return "none"
	}
	return strings.Join(list, ", ")
}
