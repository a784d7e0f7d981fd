package cli

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/supervisorhq/supervisor/coordinator/internal/roles"
	"github.com/supervisorhq/supervisor/shared/protocol"
)

// addProjectFlags adds the flags that select a repository's trusted
// .supervisor/ files.
func addProjectFlags(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.String("repo", ".", "the git repository (for its .supervisor/ files with --trust-project-gates)")
	fs.String("rev", "HEAD", "the commit whose .supervisor/ files are read")
	fs.Bool("trust-project-gates", false, "use the repository's .supervisor/gates.yaml, .supervisor/roles/, .supervisor/templates/ and .supervisor/context/")
}

func newRoles() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "roles [NAME]",
		Short: "List the roles, or show one merged along its extends chain",
		Long: `roles lists the roles tasks may name: built-in (configs/roles), the user's
(~/.supervisor/roles) and, with --trust-project-gates, the repository's
.supervisor/roles at --rev. For each it shows the layer its file is in, its
agent adapter, output schema and context strategy. With NAME it shows that
role as tasks get it: every file of its chain, merged.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			e, err := load(cmd, "roles")
			if err != nil {
				return err
			}
			ctx, stop := signalContext()
			defer stop()
			src, err := e.commandSources(ctx)
			if err != nil {
				return err
			}
			cat := src.opts.Roles
			if len(args) == 0 {
				var views []roleView
				for _, n := range cat.Names() {
					r, _ := cat.Get(n)
					views = append(views, viewRole(r))
				}
				if e.v.GetString("output") == "json" {
					return writeJSON(e.out, views)
				}
				printRoles(e.out, views)
				return nil
			}
			r, ok := cat.Get(args[0])
			if !ok {
				return exitf(ExitUsage, "unknown role %q (known: %s)", args[0], strings.Join(cat.Names(), ", "))
			}
			v := viewRole(r)
			if e.v.GetString("output") == "json" {
				return writeJSON(e.out, v)
			}
			printRole(e.out, v)
			return nil
		},
	}
	cmd.Flags().StringP("output", "o", "table", "output format: table or json")
	addProjectFlags(cmd)
	return cmd
}

// roleView is a merged role as the roles command shows it.
type roleView struct {
	Name            string              `json:"name"`
	Layer           string              `json:"layer"`
	Files           []string            `json:"files"`
	Description     string              `json:"description"`
	Agent           *protocol.AgentSpec `json:"agent,omitempty"`
	Output          string              `json:"output,omitempty"`
	Context         *roles.Context      `json:"context,omitempty"`
	AllowedTools    []string            `json:"allowed_tools,omitempty"`
	Gates           []string            `json:"gates"`
	GatesSet        bool                `json:"gates_set"`
	AllowEmpty      bool                `json:"allow_empty,omitempty"`
	Feedback        string              `json:"feedback,omitempty"`
	TimeoutSeconds  int                 `json:"timeout_seconds,omitempty"`
	MaxCostUSD      float64             `json:"max_cost_usd,omitempty"`
	Strengths       []string            `json:"strengths,omitempty"`
	Config          map[string]any      `json:"config,omitempty"`
	PromptAdditions string              `json:"prompt_additions,omitempty"`
	Prompt          string              `json:"prompt,omitempty"`
}

func viewRole(r *roles.Role) roleView {
	v := roleView{Name: r.Name, Layer: r.Layer.String(), Files: r.Files, Description: r.Description, Agent: r.AgentSpec(),
		Output: r.Output, AllowedTools: r.AllowedTools, Gates: r.Gates, GatesSet: r.GatesSet, AllowEmpty: r.AllowEmpty,
		Feedback: r.Feedback, TimeoutSeconds: r.TimeoutSeconds, MaxCostUSD: r.MaxCostUSD, Strengths: r.Strengths, Config: r.Config,
		PromptAdditions: r.PromptAdditions, Prompt: r.Prompt}
	if r.Context.Strategy != "" {
		c := r.Context
		v.Context = &c
	}
	if v.Gates == nil {
		v.Gates = []string{}
	}
	return v
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func printRoles(w io.Writer, views []roleView) {
	if len(views) == 0 {
		fmt.Fprintln(w, "no roles (none found in the built-in, user or project directories)")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ROLE\tLAYER\tAGENT\tOUTPUT\tCONTEXT\tDESCRIPTION")
	for _, v := range views {
		agent, ctx := "-", "-"
		if v.Agent != nil {
			agent = v.Agent.Adapter
		}
		if v.Context != nil {
			ctx = contextText(*v.Context)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", v.Name, v.Layer, agent, orDash(v.Output), ctx, v.Description)
	}
	tw.Flush()
}

// contextText is a role's context strategy and budget.
func contextText(c roles.Context) string {
	if c.Budget == 0 {
		return c.Strategy + " (its own budget)"
	}
	return fmt.Sprintf("%s (%d)", c.Strategy, c.Budget)
}

func printRole(w io.Writer, v roleView) {
	fmt.Fprintf(w, "role %s (%s): %s\n", v.Name, v.Layer, v.Description)
	fmt.Fprintf(w, "files: %s\n", strings.Join(v.Files, " <- "))
	if v.Agent != nil {
		fmt.Fprintf(w, "agent: %s", v.Agent.Adapter)
		if v.Agent.Model != "" {
			fmt.Fprintf(w, ", model %s", v.Agent.Model)
		}
		if len(v.Agent.Args) > 0 {
			fmt.Fprintf(w, ", args %s", strings.Join(v.Agent.Args, " "))
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "output: %s\n", orDash(v.Output))
	if v.Context != nil {
		fmt.Fprintf(w, "context: %s\n", contextText(*v.Context))
	}
	if v.MaxCostUSD > 0 {
		fmt.Fprintf(w, "budget: $%.2f per task that sets none\n", v.MaxCostUSD)
	}
	switch {
	case !v.GatesSet:
		fmt.Fprintln(w, "gates: the workflow's")
	case len(v.Gates) == 0:
		fmt.Fprintln(w, "gates: none")
	default:
		fmt.Fprintf(w, "gates: %s\n", strings.Join(v.Gates, ", "))
	}
	if v.PromptAdditions != "" {
		fmt.Fprintf(w, "prompt additions:\n%s\n", indent(v.PromptAdditions))
	}
	if v.Prompt != "" {
		fmt.Fprintf(w, "prompt template:\n%s\n", indent(v.Prompt))
	}
}

func indent(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		lines[i] = "  " + l
	}
	return strings.Join(lines, "\n")
}

func newTemplates() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "templates",
		Short: "List the workflow templates",
		Long: `templates lists the workflow templates 'plan --template' and 'submit --template'
expand: built-in (configs/templates), the user's (~/.supervisor/templates) and,
with --trust-project-gates, the repository's .supervisor/templates at --rev.
'coordinator plan --template NAME FEATURE.md' shows what one expands to.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			e, err := load(cmd, "templates")
			if err != nil {
				return err
			}
			ctx, stop := signalContext()
			defer stop()
			cat, err := e.templateCatalogue(ctx)
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(e.out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "TEMPLATE\tEXTENDS\tDESCRIPTION")
			for _, n := range cat.Names() {
				t, _ := cat.Get(n)
				fmt.Fprintf(tw, "%s\t%s\t%s\n", n, orDash(strings.Join(t.Chain[1:], ", ")), t.Description)
			}
			return tw.Flush()
		},
	}
	addProjectFlags(cmd)
	return cmd
}
