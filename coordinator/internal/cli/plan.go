package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/supervisorhq/supervisor/coordinator/internal/service"
	"github.com/supervisorhq/supervisor/coordinator/internal/templates"
	"github.com/supervisorhq/supervisor/coordinator/internal/workflow"
	"github.com/supervisorhq/supervisor/shared/workspace"
)

// planRegistryWait bounds how long plan waits for the fleet's gate
// registry when the workflow names a gate no local source defines.
const planRegistryWait = 3 * time.Second

func newPlan() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "plan --template NAME FEATURE.md",
		Short: "Expand a workflow template with a feature description and print the workflow",
		Long: `plan expands a workflow template (configs/templates, ~/.supervisor/templates,
and with --trust-project-gates the repository's .supervisor/templates) with a
feature description, a Markdown file whose optional YAML front matter sets
name, pool, gates, disable and steps, and prints the resulting workflow file.
It validates the workflow like submit does, against the same gates, roles and
context strategies (the project's too with --trust-project-gates, and the
fleet's gate registry, asked for at most 3 s, for gates no local source defines);
problems are reported as file:line:col of the printed workflow, and the exit
code is 65 when it is invalid. Nothing is submitted: 'submit --template' does
that.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			e, err := load(cmd, "plan")
			if err != nil {
				return err
			}
			ctx, stop := signalContext()
			defer stop()
			name, doc, err := e.expandTemplate(ctx, args[0])
			if err != nil {
				return err
			}
			src, err := e.commandSources(ctx)
			if err != nil {
				return err
			}
			if _, err := e.out.Write(doc); err != nil {
				return err
			}
			opts := src.opts
			if _, err := workflow.ParseWithOptions(name, doc, opts); err != nil {
				// As submit does: gates the workflow names may be the fleet
				// registry's, which only the coordinator knows. plan works
				// without a fleet, so it asks only briefly.
				rctx, cancel := context.WithTimeout(ctx, planRegistryWait)
				reg := e.registryGates(rctx, err)
				cancel()
				if reg != nil {
					opts.UserGates = reg
					_, err = workflow.ParseWithOptions(name, doc, opts)
				}
				if err != nil {
					return &ExitError{Code: ExitInvalid, Err: err}
				}
			}
			return nil
		},
	}
	cmd.Flags().String("template", "", "the workflow template to expand (required)")
	addProjectFlags(cmd)
	return cmd
}

// commandSources are the local gate, role and context sources of a
// command that reads a repository's .supervisor/ files only with
// --trust-project-gates (plan, roles): without it no repository is read.
func (e *env) commandSources(ctx context.Context) (sources, error) {
	repoPath, commit := "", ""
	if e.v.GetBool("trust-project-gates") {
		var err error
		if repoPath, commit, err = e.repoCommit(ctx); err != nil {
			return sources{}, err
		}
	}
	return e.localSources(ctx, repoPath, commit)
}

// repoCommit resolves --repo and --rev.
func (e *env) repoCommit(ctx context.Context) (string, string, error) {
	repoPath, err := filepath.Abs(e.v.GetString("repo"))
	if err != nil {
		return "", "", &ExitError{Code: ExitUsage, Err: err}
	}
	commit, err := workspace.ResolveCommit(ctx, repoPath, e.v.GetString("rev"))
	if err != nil {
		return "", "", &ExitError{Code: ExitUsage, Err: err}
	}
	return repoPath, commit, nil
}

// expandTemplate expands --template with the feature file and returns the
// name the workflow is known by in messages and the workflow document.
func (e *env) expandTemplate(ctx context.Context, file string) (string, []byte, error) {
	name := e.v.GetString("template")
	if name == "" {
		return "", nil, exitf(ExitUsage, "--template is required")
	}
	fi, err := os.Stat(file)
	if err != nil {
		return "", nil, &ExitError{Code: ExitUsage, Err: err}
	}
	if fi.Size() > maxWorkflowFile {
		return "", nil, exitf(ExitInvalid, "%s: %d bytes, over the %d-byte limit for a feature description", file, fi.Size(), maxWorkflowFile)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return "", nil, &ExitError{Code: ExitUsage, Err: err}
	}
	cat, err := e.templateCatalogue(ctx)
	if err != nil {
		return "", nil, err
	}
	tpl, ok := cat.Get(name)
	if !ok {
		return "", nil, exitf(ExitUsage, "unknown template %q (known: %v)", name, cat.Names())
	}
	feature, err := templates.ParseFeature(file, data)
	if err != nil {
		return "", nil, &ExitError{Code: ExitInvalid, Err: err}
	}
	doc, err := tpl.Expand(feature)
	if err != nil {
		return "", nil, &ExitError{Code: ExitInvalid, Err: err}
	}
	return fmt.Sprintf("%s (template %s)", file, name), doc, nil
}

// templateCatalogue loads the built-in and user templates, and the
// project's with --trust-project-gates.
func (e *env) templateCatalogue(ctx context.Context) (*templates.Catalogue, error) {
	files, err := e.readLayers("templates")
	if err != nil {
		return nil, err
	}
	if e.v.GetBool("trust-project-gates") {
		repoPath, commit, err := e.repoCommit(ctx)
		if err != nil {
			return nil, err
		}
		project, err := projectConfigFiles(ctx, repoPath, commit, "templates", true, e.errOut)
		if err != nil {
			return nil, &ExitError{Code: ExitUsage, Err: err}
		}
		files = append(files, service.ProjectFiles(project)...)
	}
	cat, err := templates.FromFiles(files, nil)
	if err != nil {
		return nil, &ExitError{Code: ExitInvalid, Err: err}
	}
	return cat, nil
}
