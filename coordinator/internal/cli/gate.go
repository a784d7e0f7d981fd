package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/supervisorhq/supervisor/coordinator/internal/api"
	"github.com/supervisorhq/supervisor/shared/config"
	"github.com/supervisorhq/supervisor/shared/gates"
)

func newGate() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "gate",
		Short: "List, add, update and remove gates; inspect and re-run their results",
		Long: `gate manages gates. list, add, update and remove work on the fleet's gate
registry, or with --task WF/NODE on one node of a running workflow; results and
rerun work on a workflow's gate runs.

Gate sources, lowest precedence first: the coordinator's built-in sets
(configs/gates) < its user file < the registry (shared by every coordinator of
the fleet, changed by gate add|update|remove) < the project's
.supervisor/gates.yaml (trusted only) < the workflow < the task. A later
definition replaces the whole gate of its name. New workflows may list any gate
of the first three by name.`,
	}
	cmd.AddCommand(newGateList(), newGateAdd(), newGateUpdate(), newGateRemove(), newGateResults(), newGateRerun())
	return cmd
}

func newGateResults() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "results WF [NODE]",
		Short: "Show each gate's outcome: status, attempt, duration, cached or not, output tail, log",
		Args:  cobra.RangeArgs(1, 2),
		RunE: clientRunE("gate", func(ctx context.Context, e *env, client *api.Client, args []string) error {
			s, err := client.Status(ctx, args[0])
			if err != nil {
				return apiErr(err)
			}
			rows := gateRows(s, args[1:])
			if len(args) == 2 && len(rows) == 0 {
				if !hasNode(s, args[1]) {
					return exitf(ExitFault, "workflow %s has no node %q", s.ID, args[1])
				}
			}
			switch e.v.GetString("output") {
			case "json":
				return writeJSON(e.out, rows)
			case "table":
				printGateRows(e.out, rows, e.v.GetInt("tail"))
				return nil
			default:
				return exitf(ExitUsage, "-o %q: want table or json", e.v.GetString("output"))
			}
		}),
	}
	cmd.Flags().StringP("output", "o", "table", "output format: table or json")
	cmd.Flags().Int("tail", 15, "output lines shown for each gate that did not pass (table format)")
	return cmd
}

// GateRow is one gate of one node in `gate results`.
type GateRow struct {
	Node string `json:"node"`
	api.GateSummary
}

func hasNode(s api.WorkflowSummary, id string) bool {
	for _, n := range s.Nodes {
		if n.ID == id {
			return true
		}
	}
	return false
}

func gateRows(s api.WorkflowSummary, only []string) []GateRow {
	var rows []GateRow
	for _, n := range s.Nodes {
		if len(only) > 0 && n.ID != only[0] {
			continue
		}
		for _, g := range n.Gates {
			rows = append(rows, GateRow{Node: n.ID, GateSummary: g})
		}
	}
	return rows
}

func printGateRows(w io.Writer, rows []GateRow, tail int) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tGATE\tSTATUS\tATTEMPT\tDURATION\tCACHED\tEXIT\tHOST\tLOG")
	for _, r := range rows {
		st := string(r.Status)
		if st == "" {
			st = "waiting"
		}
		exit := "-"
		if r.ExitCode != nil {
			exit = fmt.Sprint(*r.ExitCode)
		}
		cached := "no"
		switch {
		case r.Cached:
			cached = "yes"
		case r.CacheDisabled != "":
			cached = "off"
		}
		dur := "-"
		if r.DurationMillis > 0 {
			dur = (time.Duration(r.DurationMillis) * time.Millisecond).String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", r.Node, r.Name, st, r.Attempt, dur, cached, exit, r.Host, r.Log)
	}
	tw.Flush()
	for _, r := range rows {
		if r.Status == "" || r.Status == "passed" || r.Status == "skipped" && r.Error == "" {
			continue
		}
		fmt.Fprintf(w, "\n--- %s / %s: %s\n", r.Node, r.Name, r.Status)
		if r.IntegrityViolation {
			fmt.Fprintf(w, "integrity violation: %s\n", strings.Join(r.Violations, ", "))
		}
		if r.CacheDisabled != "" {
			fmt.Fprintf(w, "cache off: %s\n", r.CacheDisabled)
		}
		if r.Sandbox != "" {
			fmt.Fprintf(w, "sandbox: %s\n", r.Sandbox)
		}
		// The runner repeats its own error (and the violation) in the output;
		// say each thing once.
		out := r.Output
		if r.IntegrityViolation {
			out = dropLinesWith(out, "integrity violation:")
		}
		// An error that is the integrity violation was printed just above.
		violationError := r.IntegrityViolation && strings.HasPrefix(r.Error, "integrity violation")
		if r.Error != "" && !strings.Contains(out, r.Error) && !violationError {
			fmt.Fprintln(w, r.Error)
		}
		fmt.Fprintln(w, lastLines(out, tail))
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if n > 0 && len(lines) > n {
		lines = append([]string{fmt.Sprintf("... (%d earlier lines; `coordinator logs` has everything)", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

func newGateRerun() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "rerun WF [NODE]",
		Short: "Run a node's gates again (all gating or gate-failed nodes without NODE)",
		Long: `rerun runs gates again: every gate of NODE, or only --gate, or the gates of every
node that is gating or failed on its gates. A node that failed on its gates is
reopened: it goes back to gating and the dependents it caused to be skipped go
back to pending, so a workflow a flaky gate failed can still succeed. Gates run
in their dependency layers, and a passing gate is served from the cache unless
--no-cache is given.`,
		Args: cobra.RangeArgs(1, 2),
		RunE: clientRunE("gate", func(ctx context.Context, e *env, client *api.Client, args []string) error {
			req := api.GateRerunRequest{WorkflowID: args[0], Gate: e.v.GetString("gate"), NoCache: e.v.GetBool("no-cache")}
			if len(args) == 2 {
				req.NodeID = args[1]
			}
			s, err := client.GateRerun(ctx, req)
			if err != nil {
				return apiErr(err)
			}
			fmt.Fprintf(e.out, "workflow %s %s; gates re-running:\n", s.ID, s.Status)
			var rows []GateRow
			for _, r := range gateRows(s, args[1:]) {
				if r.Status == "" {
					rows = append(rows, r)
				}
			}
			printGateRows(e.out, rows, 0)
			return nil
		}),
	}
	cmd.Flags().String("gate", "", "only this gate")
	cmd.Flags().Bool("no-cache", false, "run even if a cached passing result exists")
	return cmd
}

// gateFlag maps a flag of gate add/update to a field of the gate schema.
type gateFlag struct {
	flag, field string
	kind        gateFlagKind
}

type gateFlagKind int

const (
	flagString gateFlagKind = iota
	flagDuration
	flagInt
	flagBool
	flagNames // comma-separated or repeated
	flagPaths // repeated
	flagEnv   // repeated K=V
)

// gateFieldFlags are the gate's fields settable with flags, in the order
// they are written into the definition. --name and --command are apart.
var gateFieldFlags = []gateFlag{
	{"description", "description", flagString},
	{"timeout", "timeout", flagDuration},
	{"depends-on", "depends_on", flagNames},
	{"severity", "severity", flagString},
	{"env", "env", flagEnv},
	{"working-dir", "working_dir", flagString},
	{"cache", "cache", flagBool},
	{"cache-inputs", "cache_inputs", flagPaths},
	{"force-hash-large-cache-inputs", "force_hash_large_cache_inputs", flagBool},
	{"skip-on-dependency-failure", "skip_on_dependency_failure", flagBool},
	{"allowed-writes", "allowed_writes", flagPaths},
	{"allow-shell", "allow_shell", flagBool},
	{"max-retries", "max_retries", flagInt},
	{"poll-interval", "poll_interval", flagDuration},
	{"max-pending", "max_pending", flagDuration},
	{"image", "image", flagString},
	{"pool", "pool", flagString},
	{"cache-dirs", "cache_dirs", flagPaths},
}

// addGateFieldFlags adds the gate's field flags. --timeout shadows the
// global --timeout on these commands: here it is the gate's, as in
// `gate update ID --timeout 600`.
func addGateFieldFlags(fs *pflag.FlagSet) {
	fs.StringArray("command", nil, "the gate's program, then each argument: repeat --command, or give them after -- (argv, no shell)")
	fs.String("description", "", "free text")
	fs.String("timeout", "", "the gate's timeout: a duration (10m) or seconds (600); default 5m, at most 1h")
	fs.StringSlice("depends-on", nil, "gates that must finish first (comma-separated or repeated)")
	fs.String("severity", "", "error (default), warning or info")
	fs.StringArray("env", nil, "environment variable K=V (repeat; replaces the gate's whole env)")
	fs.String("working-dir", "", "directory to run in, relative to the repository root")
	fs.Bool("cache", true, "cache passing results (--cache=false turns it off)")
	fs.StringArray("cache-inputs", nil, "extra path or glob hashed into the cache key (repeat)")
	fs.Bool("force-hash-large-cache-inputs", false, "hash large cache inputs in full")
	fs.Bool("skip-on-dependency-failure", true, "skip the gate when a dependency failed (--skip-on-dependency-failure=false runs it anyway)")
	fs.StringArray("allowed-writes", nil, "path or glob the gate may change in the workspace (repeat)")
	fs.Bool("allow-shell", false, "allow a command that runs a shell")
	fs.Int("max-retries", 0, "how many retries of the agent the gate's failures may cause before the node escalates (default 3)")
	fs.String("poll-interval", "", "how often a pending gate (exit 75) is polled: duration or seconds (default 30s)")
	fs.String("max-pending", "", "how long a gate may stay pending: duration or seconds (default 24h)")
	fs.String("image", "", "container image the gate runs in")
	fs.String("pool", "", "runner pool of the gate's jobs (default: default)")
	fs.StringArray("cache-dirs", nil, "directory the gate's tools keep a cache in, relative to HOME or absolute in the container (repeat): warm, trusted content; the gate's writes are thrown away")
}

// gateFields returns the field flags given on the command line, as gate
// schema fields (read from the flags themselves: --timeout is the gate's
// here, and SUPERVISOR_* variables must not leak into a definition).
func gateFields(fs *pflag.FlagSet) ([]api.GateField, error) {
	var out []api.GateField
	for _, f := range gateFieldFlags {
		if !fs.Changed(f.flag) {
			continue
		}
		var v any
		switch f.kind {
		case flagString:
			v, _ = fs.GetString(f.flag)
		case flagDuration:
			s, _ := fs.GetString(f.flag)
			if n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64); err == nil {
				v = n // seconds
			} else {
				v = s
			}
		case flagInt:
			v, _ = fs.GetInt(f.flag)
		case flagBool:
			v, _ = fs.GetBool(f.flag)
		case flagNames:
			names, _ := fs.GetStringSlice(f.flag)
			v = append([]string{}, names...)
		case flagPaths:
			paths, _ := fs.GetStringArray(f.flag)
			v = append([]string{}, paths...)
		case flagEnv:
			pairs, _ := fs.GetStringArray(f.flag)
			env := map[string]string{}
			for _, p := range pairs {
				k, val, ok := strings.Cut(p, "=")
				if !ok || k == "" {
					return nil, exitf(ExitUsage, "--env %q: want NAME=VALUE", p)
				}
				env[k] = val
			}
			v = env
		}
		out = append(out, api.GateField{Key: f.field, Value: v})
	}
	return out, nil
}

// commandArgv is the gate's argv: the --command values, then whatever
// follows "--". A single value with spaces is a shell-style string, which
// a gate's command is not.
func commandArgv(cmd *cobra.Command, args []string) ([]string, error) {
	argv, _ := cmd.Flags().GetStringArray("command")
	if dash := cmd.ArgsLenAtDash(); dash >= 0 {
		argv = append(append([]string{}, argv...), args[dash:]...)
	}
	if len(argv) == 1 && strings.ContainsFunc(argv[0], unicode.IsSpace) {
		f := strings.Fields(argv[0])
		repeated := make([]string, len(f))
		for i, a := range f {
			repeated[i] = "--command " + shellQuote(a)
		}
		return nil, exitf(ExitUsage, "--command %q is one argument containing spaces, but a gate's command is an argv list run without a shell.\n"+
			"Give the program and each argument separately: %s\n"+
			"or put the command after --: coordinator gate add --name NAME -- %s",
			argv[0], strings.Join(repeated, " "), strings.Join(f, " "))
	}
	return argv, nil
}

// shellQuote quotes s for display when a shell would split or expand it.
func shellQuote(s string) string {
	if s == "" || strings.ContainsAny(s, " \t\n\"'`$\\|&;<>()*?[]{}~#!") {
		return strconv.Quote(s)
	}
	return s
}

func formatArgv(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = shellQuote(a)
	}
	return strings.Join(q, " ")
}

// splitTask parses --task WF/NODE.
func splitTask(s string) (string, string, error) {
	wf, node, ok := strings.Cut(s, "/")
	if !ok || wf == "" || node == "" || strings.Contains(node, "/") {
		return "", "", exitf(ExitUsage, "--task %q: want WORKFLOW/NODE, e.g. wf-abc123/build", s)
	}
	return wf, node, nil
}

// taskFlag returns the workflow and node --task names ("" and "" without
// --task).
func taskFlag(fs *pflag.FlagSet) (wf, node string, err error) {
	if task, _ := fs.GetString("task"); task != "" {
		return splitTask(task)
	}
	return "", "", nil
}

func outputFormat(fs *pflag.FlagSet) (string, error) {
	f, _ := fs.GetString("output")
	if f != "table" && f != "json" {
		return "", exitf(ExitUsage, "-o %q: want table or json", f)
	}
	return f, nil
}

// gateClient runs call against the coordinator like clientRunE. On gate
// add and update, --timeout is the gate's; their API deadline is then
// SUPERVISOR_TIMEOUT, or the config file's timeout, or the default.
func gateClient(cmd *cobra.Command, call func(ctx context.Context, e *env, client *api.Client) error) error {
	e, err := load(cmd, "gate")
	if err != nil {
		return err
	}
	if cmd.LocalNonPersistentFlags().Lookup("timeout") != nil {
		e.v.Set("timeout", apiDeadline(cmd, e))
	}
	return e.callAPI(func(ctx context.Context, client *api.Client) error { return call(ctx, e, client) })
}

func apiDeadline(cmd *cobra.Command, e *env) time.Duration {
	if d, err := time.ParseDuration(os.Getenv(config.EnvPrefix + "_TIMEOUT")); err == nil && d > 0 {
		return d
	}
	if !cmd.Flags().Changed("timeout") { // the value comes from the config file, if any
		if d, err := time.ParseDuration(e.v.GetString("timeout")); err == nil && d > 0 {
			return d
		}
	}
	if f := cmd.Root().PersistentFlags().Lookup("timeout"); f != nil {
		if d, err := time.ParseDuration(f.DefValue); err == nil && d > 0 {
			return d
		}
	}
	return 30 * time.Second
}

func newGateList() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "list [--task WF/NODE]",
		Short: "List the gates new workflows can use (built-in, user, registry), or a node's effective gates",
		Long: `list shows every gate available to new workflows with its source: builtin (the
coordinator's configs/gates), user (its user gate file) or registry (gate add);
a registry gate replaces a built-in or user gate of the same name. With --task
WF/NODE it shows that node's effective gates in dispatch order (dependency
layers, ties alphabetical), where each comes from (the workflow or the task),
whether the task requires it, what its failure does (on_fail) and its status.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			format, err := outputFormat(cmd.Flags())
			if err != nil {
				return err
			}
			var req api.GateListRequest
			if req.WorkflowID, req.NodeID, err = taskFlag(cmd.Flags()); err != nil {
				return err
			}
			return gateClient(cmd, func(ctx context.Context, e *env, client *api.Client) error {
				resp, err := client.GateList(ctx, req)
				if err != nil {
					return apiErr(err)
				}
				if format == "json" {
					return writeJSON(e.out, resp)
				}
				if req.NodeID != "" {
					fmt.Fprintf(e.out, "node %s/%s (%s):\n", resp.WorkflowID, resp.NodeID, resp.NodeStatus)
				}
				printGateInfos(e.out, resp.Gates, req.NodeID != "")
				return nil
			})
		},
	}
	cmd.Flags().String("task", "", "a node of a workflow, WF/NODE: list its effective gates")
	cmd.Flags().StringP("output", "o", "table", "output format: table or json")
	return cmd
}

func printGateInfos(w io.Writer, infos []api.GateInfo, node bool) {
	if len(infos) == 0 {
		if node {
			fmt.Fprintln(w, "no gates")
		} else {
			fmt.Fprintln(w, "no gates: add one with coordinator gate add --name NAME -- PROGRAM ARGS…")
		}
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	head := "NAME\tSOURCE\tCOMMAND\tTIMEOUT\tSEVERITY\tDEPENDS_ON"
	if node {
		head += "\tON_FAIL\tREQUIRED\tSTATUS"
	}
	fmt.Fprintln(tw, head)
	for _, g := range infos {
		d := g.Definition
		src := g.Source
		if len(g.Overrides) > 0 {
			src += " (overrides " + strings.Join(g.Overrides, ", ") + ")"
		}
		command := formatArgv(d.Command)
		if r := []rune(command); len(r) > 60 {
			command = string(r[:59]) + "…"
		}
		deps := "-"
		if len(d.DependsOn) > 0 {
			deps = strings.Join(d.DependsOn, ",")
		}
		sev := d.Severity
		if sev == "" {
			sev = "error"
		}
		line := fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s", g.Name, src, command,
			gates.FormatDuration(time.Duration(d.TimeoutSeconds)*time.Second), sev, deps)
		if node {
			req, st := "no", string(g.Status)
			if g.Required != nil && *g.Required {
				req = "yes"
			}
			if st == "" {
				st = "-"
			}
			line += fmt.Sprintf("\t%s\t%s\t%s", g.OnFail, req, st)
		}
		fmt.Fprintln(tw, line)
	}
	tw.Flush()
}

func printGateChange(w, errOut io.Writer, resp api.GateChangeResponse, where string) {
	rev := ""
	if resp.Gate.Revision > 0 && resp.Action != api.GateRemoved {
		rev = fmt.Sprintf(" (revision %d)", resp.Gate.Revision)
	}
	fmt.Fprintf(w, "gate %s %s %s%s", resp.Gate.Name, resp.Action, where, rev)
	if resp.Note != "" {
		fmt.Fprintf(w, ": %s", resp.Note)
	}
	fmt.Fprintln(w)
	if resp.Action != api.GateRemoved {
		printGateInfos(w, []api.GateInfo{resp.Gate}, resp.Gate.Layer != nil)
	}
	for _, warn := range resp.Warnings {
		fmt.Fprintf(errOut, "coordinator: warning: %s\n", warn)
	}
}

// gateWhere names what a gate change applied to.
// reportGateChange prints the outcome of gate add, update or remove.
func reportGateChange(e *env, format string, resp api.GateChangeResponse, err error, wf, node string) error {
	if err != nil {
		return apiErr(err)
	}
	if format == "json" {
		return writeJSON(e.out, resp)
	}
	printGateChange(e.out, e.errOut, resp, gateWhere(wf, node, resp.Action))
	return nil
}

func gateWhere(wf, node, action string) string {
	switch {
	case node != "" && action == api.GateRemoved:
		return fmt.Sprintf("from node %s/%s", wf, node)
	case node != "":
		return fmt.Sprintf("on node %s/%s", wf, node)
	case action == api.GateRemoved:
		return "from the registry"
	}
	return "in the registry"
}

func newGateAdd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "add [--task WF/NODE] --name NAME (--command PROG [--command ARG]… | -- PROG ARG…) [flags] | --file GATE.yaml",
		Short: "Add a gate to the fleet's registry, or to a node of a running workflow",
		Long: `add defines a gate. Without --task it goes to the fleet's gate registry, which
every coordinator reads at each submission: new workflows can then list it by
name. A registry gate replaces a built-in or user gate of the same name; adding
a name that exists needs --replace.

With --task WF/NODE the gate is added to that node of a running workflow, as
required (or --optional), from the node's next gate round on: a node that is
gating runs it in its dependency layer now. A finished node cannot change.
With --task, --name alone adds a gate the workflow or the fleet defines.

Commands are argv lists run without a shell: give the program and each argument
with a repeated --command, or after --:

  coordinator gate add --name vet -- go vet ./...
  coordinator gate add --name typecheck --command npm --command run --command typecheck

--file reads one gate in the schema of an entry of a workflow's gates list
(YAML or JSON), e.g. {name: vet, command: [go, vet, ./...], timeout: 5m}.
The definition is validated like a gate file; problems point at its lines.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if dash := cmd.ArgsLenAtDash(); dash > 0 || (dash < 0 && len(args) > 0) {
				return exitf(ExitUsage, "unexpected arguments %q: put the command after -- (gate add --name NAME -- PROGRAM ARGS…)", args)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			fs := cmd.Flags()
			format, err := outputFormat(fs)
			if err != nil {
				return err
			}
			req := api.GateAddRequest{Filename: "gate add"}
			req.Replace, _ = fs.GetBool("replace")
			req.Optional, _ = fs.GetBool("optional")
			req.OnFail, _ = fs.GetString("on-fail")
			req.Name, _ = fs.GetString("name")
			task, _ := fs.GetString("task")
			if task != "" {
				if req.WorkflowID, req.NodeID, err = splitTask(task); err != nil {
					return err
				}
			} else if fs.Changed("optional") || fs.Changed("on-fail") {
				return exitf(ExitUsage, "--optional and --on-fail belong to the task that runs a gate: give --task WF/NODE")
			}
			fields, err := gateFields(fs)
			if err != nil {
				return err
			}
			argv, err := commandArgv(cmd, args)
			if err != nil {
				return err
			}
			switch file, _ := fs.GetString("file"); {
			case file != "":
				if len(fields) > 0 || len(argv) > 0 {
					return exitf(ExitUsage, "--file defines the whole gate: give its fields in the file, not as flags")
				}
				data, err := readGateFile(file)
				if err != nil {
					return err
				}
				req.Definition, req.Filename = string(data), file
			case task != "" && req.Name != "" && len(argv) == 0 && len(fields) == 0:
				// a gate the workflow or the fleet defines, by name
			default:
				if req.Name == "" {
					return exitf(ExitUsage, "--name is required (or --file)")
				}
				if len(argv) == 0 {
					return exitf(ExitUsage, "give the gate's command: --command PROGRAM --command ARG…, or -- PROGRAM ARG…")
				}
				def := append([]api.GateField{{Key: "name", Value: req.Name}, {Key: "command", Value: argv}}, fields...)
				if req.Definition, err = api.RenderGate(def); err != nil {
					return err
				}
			}
			return gateClient(cmd, func(ctx context.Context, e *env, client *api.Client) error {
				resp, err := client.GateAdd(ctx, req)
				return reportGateChange(e, format, resp, err, req.WorkflowID, req.NodeID)
			})
		},
	}
	fs := cmd.Flags()
	fs.String("name", "", "the gate's name")
	fs.String("file", "", "read the gate's definition (YAML or JSON) from this file")
	fs.String("task", "", "add the gate to this node of a running workflow, WF/NODE")
	fs.Bool("replace", false, "redefine a gate that exists already")
	fs.Bool("optional", false, "with --task: the node does not require the gate")
	fs.String("on-fail", "", "with --task: what the gate's failure does: block, retry_with_feedback or warn")
	fs.StringP("output", "o", "table", "output format: table or json")
	addGateFieldFlags(fs)
	return cmd
}

func readGateFile(path string) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, &ExitError{Code: ExitUsage, Err: err}
	}
	if fi.Size() > gates.MaxFileSize {
		return nil, exitf(ExitInvalid, "%s: %d bytes, over the %d-byte limit for a gate file", path, fi.Size(), gates.MaxFileSize)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, &ExitError{Code: ExitUsage, Err: err}
	}
	return data, nil
}

func newGateUpdate() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "update NAME [--task WF/NODE] [--timeout 10m] [--max-retries 5] [flags] [-- PROG ARG…]",
		Short: "Change some fields of a registry gate, or of a node's gate",
		Long: `update changes only the fields whose flags are given (--unset FIELD returns one
to its default) and validates the whole gate again before storing it. A built-in
or user gate updated without --task is copied to the registry with the changes,
overriding it; gate remove brings the original back. With --task WF/NODE the
change applies to that node of a running workflow, from its next gate round.

--timeout here is the gate's timeout; the deadline for reaching the coordinator
then comes from SUPERVISOR_TIMEOUT or the config file (default 30s).`,
		Args: func(cmd *cobra.Command, args []string) error {
			n := len(args)
			if dash := cmd.ArgsLenAtDash(); dash >= 0 {
				n = dash
			}
			if n != 1 {
				return exitf(ExitUsage, "gate update takes the gate's name (and a command after --), got %q", args)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			fs := cmd.Flags()
			format, err := outputFormat(fs)
			if err != nil {
				return err
			}
			req := api.GateUpdateRequest{Name: args[0], Set: map[string]json.RawMessage{}}
			if req.WorkflowID, req.NodeID, err = taskFlag(fs); err != nil {
				return err
			}
			fields, err := gateFields(fs)
			if err != nil {
				return err
			}
			argv, err := commandArgv(cmd, args)
			if err != nil {
				return err
			}
			if len(argv) > 0 {
				fields = append(fields, api.GateField{Key: "command", Value: argv})
			}
			for _, f := range fields {
				if req.Set[f.Key], err = json.Marshal(f.Value); err != nil {
					return err
				}
			}
			req.Unset, _ = fs.GetStringSlice("unset")
			if len(req.Set) == 0 && len(req.Unset) == 0 {
				return exitf(ExitUsage, "nothing to change: give the fields to change, e.g. --timeout 10m --max-retries 5")
			}
			return gateClient(cmd, func(ctx context.Context, e *env, client *api.Client) error {
				resp, err := client.GateUpdate(ctx, req)
				return reportGateChange(e, format, resp, err, req.WorkflowID, req.NodeID)
			})
		},
	}
	fs := cmd.Flags()
	fs.String("task", "", "update the gate of this node of a running workflow, WF/NODE")
	fs.StringSlice("unset", nil, "schema fields to return to their defaults, e.g. --unset env,depends_on")
	fs.StringP("output", "o", "table", "output format: table or json")
	addGateFieldFlags(fs)
	return cmd
}

func newGateRemove() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "remove NAME [--task WF/NODE]",
		Short: "Remove a gate from the registry, or from a node of a running workflow",
		Long: `remove deletes a registry gate; a built-in or user gate of the same name, if any,
applies again. Built-in and user gates themselves cannot be removed: they live
in the coordinator's gate files (override them with gate add --replace or gate
update). With --task WF/NODE the node stops running the gate from its next gate
round; a gate another of its gates depends on cannot be removed.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			format, err := outputFormat(cmd.Flags())
			if err != nil {
				return err
			}
			req := api.GateRemoveRequest{Name: args[0]}
			if req.WorkflowID, req.NodeID, err = taskFlag(cmd.Flags()); err != nil {
				return err
			}
			return gateClient(cmd, func(ctx context.Context, e *env, client *api.Client) error {
				resp, err := client.GateRemove(ctx, req)
				return reportGateChange(e, format, resp, err, req.WorkflowID, req.NodeID)
			})
		},
	}
	cmd.Flags().String("task", "", "remove the gate from this node of a running workflow, WF/NODE")
	cmd.Flags().StringP("output", "o", "table", "output format: table or json")
	return cmd
}

// dropLinesWith removes the lines of s that contain sub.
func dropLinesWith(s, sub string) string {
	lines := strings.Split(s, "\n")
	kept := lines[:0]
	for _, l := range lines {
		if !strings.Contains(l, sub) {
			kept = append(kept, l)
		}
	}
	return strings.Join(kept, "\n")
}
