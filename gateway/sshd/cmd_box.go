package sshd

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"sbx.dev/sbx/fleet"
	"sbx.dev/sbx/gateway/sshd/tui"
	"sbx.dev/sbx/internal/termtext"
)

// Help groups of the root command.
const (
	groupBoxes = "boxes"
	groupAdmin = "admin"
)

// noFleet answers box commands on a gateway running without the core.
func (s *Server) noFleet() error {
	if s.NoFleet != "" {
		return unavailable(s.NoFleet)
	}
	return unavailable("boxes are not available on this gateway (no fleet configured)")
}

// unavailable is fleet.ErrUnavailable worded as the reason alone.
type unavailable string

func (u unavailable) Error() string { return string(u) }
func (u unavailable) Unwrap() error { return fleet.ErrUnavailable }

// fleet is the core, or an error when the gateway runs without one.
func (c *call) fleet() (*fleet.Fleet, error) {
	if c.srv.Fleet == nil {
		return nil, c.srv.noFleet()
	}
	return c.srv.Fleet, nil
}

// boxCmd is a command acting on one box: it gets the core and the box name
// (the first argument) and never runs without both.
func (c *call) boxCmd(use, short string, args cobra.PositionalArgs, run func(cmd *cobra.Command, f *fleet.Fleet, box string, rest []string) error) *cobra.Command {
	return &cobra.Command{
		Use:     use,
		Short:   short,
		Args:    args,
		GroupID: groupBoxes,
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := c.fleet()
			if err != nil {
				return err
			}
			return run(cmd, f, args[0], args[1:])
		},
	}
}

// boxCmds are the commands of issue 5's SSH front, one per core operation.
func (c *call) boxCmds() []*cobra.Command {
	return []*cobra.Command{
		c.newCmd(), c.lsCmd(), c.statusCmd(), c.logsCmd(), c.answerCmd(), c.askCmd(), c.inboxCmd(),
		c.diffCmd(), c.sleepCmd(), c.wakeCmd(), c.keepCmd(true), c.keepCmd(false), c.rmCmd(), c.allowCmd(),
		c.titleCmd(), c.repoCmd(),
		c.extendCmd(),
		c.checkpointCmd(), c.checkpointsCmd(), c.rewindCmd(), c.forkCmd(),
	}
}

func (c *call) newCmd() *cobra.Command {
	var repos, allow []string
	var ref, agentName, setup, memory, cpus, profileName string
	var keep bool
	cmd := &cobra.Command{
		Use:   "new [--repo R]… [--ref REF] [--profile NAME] [--agent P] [--allow DOMAIN[:PORT]]… [--keep] [--memory MiB] [--cpus N] [--setup SCRIPT|-] TASK…",
		Short: "Delegate a task to a new box",
		Example: c.examples(`new --agent script "hello world"`,
			`new --repo acme/widget --agent claude "fix the flaky test"`,
			`new --repo acme/widget --setup - "make it build" < setup.sh`,
			`new --cpus 2 --memory 2048 --repo acme/widget "run the slow test suite"`,
			`new --profile node --repo acme/widget "fix the lint errors"`,
			`new --json --repo acme/widget "bump the deps"`),
		GroupID: groupBoxes,
		Args:    cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := c.fleet()
			if err != nil {
				return err
			}
			if setup == "-" {
				b, err := io.ReadAll(io.LimitReader(cmd.InOrStdin(), fleet.MaxSetupBytes+1))
				if err != nil {
					return fmt.Errorf("read the setup script from stdin: %w", err)
				}
				setup = string(b)
			}
			req := fleet.DelegateRequest{Task: strings.Join(args, " "), Agent: agentName, Allow: allow, Keep: keep, Setup: setup, Profile: profileName}
			if req.MemoryMiB, err = fleet.ParseMemory(memory); err != nil {
				return fmt.Errorf("--memory: %w", err)
			}
			if req.VCPUs, err = fleet.ParseCPUs(cpus); err != nil {
				return fmt.Errorf("--cpus: %w", err)
			}
			for _, r := range repos {
				req.Repos = append(req.Repos, fleet.RepoSpec{Repo: r, Ref: ref})
			}
			if ref != "" && len(repos) == 0 {
				return fmt.Errorf("--ref %q without --repo: %w", ref, fleet.ErrInvalid)
			}
			if !wantJSON(cmd) {
				req.Progress = stepLines(cmd.ErrOrStderr())
			}
			mentioned := f.MentionedRepos(req.Task, req.Repos)
			b, err := f.Delegate(cmd.Context(), c.actor, req)
			if err != nil {
				return err
			}
			if wantJSON(cmd) {
				// A list, never null: a script reads .mentioned_repos[] either way.
				return writeJSON(cmd.OutOrStdout(), newResult{Box: b, MentionedRepos: append([]string{}, mentioned...)})
			}
			for _, r := range mentioned {
				fmt.Fprintf(cmd.ErrOrStderr(), "the task names %s: add it with --repo %s (to this box: %s repo add %s %s)\n", r, r, c.usagePrefix(), b.Name, r)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s\n", b.Name)
			fmt.Fprintf(cmd.ErrOrStderr(), "box %s is %s; follow it with: %s logs -f %s\n", b.Name, b.State, c.usagePrefix(), b.Name)
			return nil
		},
	}
	cmd.Flags().StringArrayVar(&repos, "repo", nil, "a repository (owner/name or https URL); repeat for more")
	cmd.Flags().StringVar(&ref, "ref", "", "branch, tag or commit of the repositories (default: their default branch)")
	cmd.Flags().StringVar(&agentName, "agent", "", "agent profile: claude (default) or script")
	cmd.Flags().StringVar(&profileName, "profile", "", "a project profile (see profile ls; default: the first repository's, if set with profile default)")
	cmd.Flags().StringArrayVar(&allow, "allow", nil, "an extra egress domain the box may reach (example.com, *.example.com; ports 80 and 443, or example.com:8443) or a preset (@npm; see presets); repeat for more")
	cmd.Flags().BoolVar(&keep, "keep", false, "never destroy the box while it sleeps")
	cmd.Flags().StringVar(&memory, "memory", "", "the box's memory in MiB (default: the gateway's vm.memory_mib; at most box.max_memory_mib)")
	cmd.Flags().StringVar(&cpus, "cpus", "", "the box's vCPUs (default: the gateway's vm.vcpus; at most box.max_cpus)")
	cmd.Flags().StringVar(&setup, "setup", "", "a shell script run as root in the box before the agent starts (packages, toolchains); - reads it from stdin")
	jsonFlag(cmd)
	return cmd
}

// newResult is new's --json answer: the box, and the repositories its
// task names that it was not given (offered, never added).
type newResult struct {
	fleet.Box
	MentionedRepos []string `json:"mentioned_repos"`
}

// stepLines writes a delegation's steps to w, one line each: the step's
// text when it starts ("cloning acme/widget… "), its duration when it ends.
// The core's text is plain (repo names it has checked, fixed words).
func stepLines(w io.Writer) func(fleet.Step) {
	return func(s fleet.Step) {
		// The core's wording holds names it validated; sanitized all the
		// same, like every line this front writes to a terminal.
		if !s.Done {
			fmt.Fprintf(w, "%s ", termtext.String(s.Doing()))
			return
		}
		fmt.Fprintf(w, "%s\n", termtext.String(s.Result()))
	}
}

func (c *call) lsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "ls [QUERY…]",
		Short:   "List your boxes (admins: every box); QUERY keeps those whose name, title, task or repos contain it",
		Example: c.examples("ls", "ls --json", "ls flaky test", "ls acme/widget"),
		GroupID: groupBoxes,
		Args:    cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := c.fleet()
			if err != nil {
				return err
			}
			boxes, err := f.List(cmd.Context(), c.actor)
			if err != nil {
				return err
			}
			query := strings.Join(args, " ")
			boxes = fleet.FilterBoxes(boxes, query)
			if wantJSON(cmd) {
				if boxes == nil {
					boxes = []fleet.Box{}
				}
				return writeJSON(cmd.OutOrStdout(), boxes)
			}
			if len(boxes) == 0 && strings.TrimSpace(query) != "" {
				fmt.Fprintf(cmd.ErrOrStderr(), "no box matches %q\n", termtext.String(strings.TrimSpace(query)))
				return nil
			}
			if len(boxes) == 0 {
				fmt.Fprintf(cmd.ErrOrStderr(), "no boxes; start one with: %s new TASK\n", c.usagePrefix())
				return nil
			}
			now := c.srv.Now()
			tw := table(cmd.OutOrStdout())
			fmt.Fprintln(tw, "NAME\tOWNER\tSTATE\tAGENT\tSIZE\tAGE\tOUTPUT\tDEADLINE\tTITLE")
			for _, b := range boxes {
				state := string(b.State)
				if b.Question.Len() > 0 {
					state += " ?"
				}
				if b.Keep {
					state += " (kept)"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", b.Name, b.Owner, state, b.Agent, fmt.Sprintf("%dMiB/%dcpu", b.MemoryMiB, b.VCPUs),
					age(now, b.Created), age(now, b.LastOutput), age(now, b.Deadline), clip(oneLine(b.Title.String()), 60))
			}
			return tw.Flush()
		},
	}
	jsonFlag(cmd)
	return cmd
}

func (c *call) statusCmd() *cobra.Command {
	cmd := c.boxCmd("status BOX", "Show one box", cobra.ExactArgs(1),
		func(cmd *cobra.Command, f *fleet.Fleet, box string, _ []string) error {
			b, err := f.Get(cmd.Context(), c.actor, box)
			if err != nil {
				return err
			}
			if wantJSON(cmd) {
				return writeJSON(cmd.OutOrStdout(), b)
			}
			writeBox(cmd.OutOrStdout(), b, c.srv.Now())
			return nil
		})
	jsonFlag(cmd)
	cmd.Example = c.examples("status fix-the-flaky-3f2a1c", "status --json fix-the-flaky-3f2a1c")
	return cmd
}

// writeBox prints a box for people, one field a line.
func writeBox(w io.Writer, b fleet.Box, now time.Time) {
	tw := table(w)
	row := func(k, v string) { fmt.Fprintf(tw, "%s:\t%s\n", k, v) }
	row("name", b.Name)
	row("title", oneLine(b.Title.String()))
	row("owner", b.Owner)
	row("state", string(b.State))
	if b.Reason.Len() > 0 {
		row("reason", oneLine(b.Reason.String()))
	}
	row("agent", b.Agent)
	if b.Profile != "" {
		row("profile", b.Profile)
	}
	row("size", size(b))
	row("task", oneLine(b.Task.String()))
	for _, r := range b.Repos {
		ref := r.Ref
		if ref == "" {
			ref = "default branch"
		}
		row("repo", fmt.Sprintf("%s (%s, in /workspace/%s, branch %s)", r.Name, ref, r.Dir, r.Branch))
	}
	if len(b.Allow) > 0 {
		row("allow", strings.Join(b.Allow, " "))
	}
	row("keep", strconv.FormatBool(b.Keep))
	row("created", when(now, b.Created))
	row("last output", when(now, b.LastOutput))
	if !b.SleptAt.IsZero() {
		row("asleep since", when(now, b.SleptAt))
	}
	if !b.Expires.IsZero() {
		row("expires", when(now, b.Expires))
	}
	if !b.Deadline.IsZero() {
		row("deadline", when(now, b.Deadline))
	}
	row("turns", strconv.Itoa(b.Turns))
	row("inbox", strconv.Itoa(b.Inbox))
	row("log", fmt.Sprintf("%d bytes", b.LogSize))
	if b.CostUSD > 0 {
		row("cost", fmt.Sprintf("$%.2f", b.CostUSD))
	}
	_ = tw.Flush()
	if b.Question.Len() > 0 {
		fmt.Fprintf(w, "\nquestion:\n%s\n", strings.TrimRight(b.Question.String(), "\n"))
	}
}

func (c *call) logsCmd() *cobra.Command {
	var follow bool
	var from int64
	cmd := c.boxCmd("logs [-f] [--from N] BOX", "Print a box's log (-f: follow it until the box is destroyed)", cobra.ExactArgs(1),
		func(cmd *cobra.Command, f *fleet.Fleet, box string, _ []string) error {
			if from < 0 {
				return fmt.Errorf("--from %d: must not be negative: %w", from, fleet.ErrInvalid)
			}
			ctx := cmd.Context()
			ls, err := f.Logs(ctx, c.actor, box, from, follow)
			if err != nil {
				return err
			}
			defer ls.Close()
			out := cmd.OutOrStdout()
			for {
				ch, err := ls.Next(ctx)
				if errors.Is(err, io.EOF) || (err != nil && ctx.Err() != nil) {
					return nil
				}
				if err != nil {
					return err
				}
				if wantJSON(cmd) {
					err = writeJSONLine(out, logRecord{Text: ch.Text.String(), ResumeFrom: ch.Offset})
				} else {
					_, err = io.WriteString(out, ch.Text.String())
				}
				if err != nil {
					return nil // the client went away
				}
			}
		})
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new output until the box is destroyed")
	cmd.Flags().Int64Var(&from, "from", 0, "start at this byte offset of the log")
	cmd.Example = c.examples("logs fix-the-flaky-3f2a1c", "logs -f fix-the-flaky-3f2a1c",
		"logs --from 4096 fix-the-flaky-3f2a1c",
		"logs -f --json fix-the-flaky-3f2a1c   # one object a line: {\"text\": …, \"resume_from\": N}")
	return jsonFlag(cmd)
}

// logRecord is one piece of a log under --json, a line of its own: its
// text (whole lines) and the --from that resumes after it.
type logRecord struct {
	Text       string `json:"text"`
	ResumeFrom int64  `json:"resume_from"`
}

func (c *call) answerCmd() *cobra.Command {
	var followUp, force bool
	cmd := c.boxCmd("answer [--follow-up] [--force] BOX TEXT…",
		"Answer the box's question (--follow-up: send a message; mid-turn it queues in the inbox unless --force)",
		cobra.MinimumNArgs(2),
		func(cmd *cobra.Command, f *fleet.Fleet, box string, rest []string) error {
			text := strings.Join(rest, " ")
			var res fleet.AnswerResult
			var err error
			if followUp || force {
				res, err = f.FollowUp(cmd.Context(), c.actor, box, text, force)
			} else {
				res, err = f.Answer(cmd.Context(), c.actor, box, text)
				if errors.Is(err, fleet.ErrConflict) {
					err = fmt.Errorf("%w (to send a new message: answer --follow-up %s TEXT)", err, box)
				}
			}
			if err != nil {
				return err
			}
			if wantJSON(cmd) {
				return writeJSON(cmd.OutOrStdout(), res)
			}
			switch res.Outcome {
			case fleet.Answered:
				fmt.Fprintf(cmd.OutOrStdout(), "answered; box %s is %s\n", box, res.Box.State)
			case fleet.Queued:
				fmt.Fprintf(cmd.OutOrStdout(), "queued as inbox item %d (the agent is mid-turn; --force interrupts it)\n", res.InboxID)
			default:
				fmt.Fprintf(cmd.OutOrStdout(), "%s; box %s is %s\n", res.Outcome, box, res.Box.State)
			}
			return nil
		})
	cmd.Flags().BoolVar(&followUp, "follow-up", false, "send a message rather than answer a question")
	cmd.Flags().BoolVar(&force, "force", false, "with --follow-up: interrupt a running turn instead of queueing")
	cmd.Example = c.examples(`answer fix-the-flaky-3f2a1c "use v2"`, `answer --follow-up fix-the-flaky-3f2a1c "now add a test"`,
		`answer --follow-up --force fix-the-flaky-3f2a1c "stop, use v3"`)
	jsonFlag(cmd)
	return cmd
}

func (c *call) askCmd() *cobra.Command {
	var fresh bool
	cmd := c.boxCmd("ask [--new] BOX QUESTION…", "Ask a read-only side question without disturbing the run", cobra.MinimumNArgs(2),
		func(cmd *cobra.Command, f *fleet.Fleet, box string, rest []string) error {
			ans, err := f.Ask(cmd.Context(), c.actor, box, strings.Join(rest, " "), fresh)
			if err != nil {
				return err
			}
			if wantJSON(cmd) {
				return writeJSON(cmd.OutOrStdout(), map[string]any{"box": box, "answer": ans})
			}
			fmt.Fprintln(cmd.OutOrStdout(), strings.TrimRight(ans.String(), "\n"))
			return nil
		})
	cmd.Flags().BoolVar(&fresh, "new", false, "start a new side thread")
	cmd.Example = c.examples(`ask fix-the-flaky-3f2a1c "which tests did you run?"`, `ask --new fix-the-flaky-3f2a1c "what is left?"`)
	jsonFlag(cmd)
	return cmd
}

func (c *call) inboxCmd() *cobra.Command {
	cmd := c.boxCmd("inbox BOX", "List the follow-ups queued for a box", cobra.ExactArgs(1),
		func(cmd *cobra.Command, f *fleet.Fleet, box string, _ []string) error {
			items, err := f.Inbox(cmd.Context(), c.actor, box)
			if err != nil {
				return err
			}
			if wantJSON(cmd) {
				if items == nil {
					items = []fleet.InboxItem{}
				}
				return writeJSON(cmd.OutOrStdout(), items)
			}
			if len(items) == 0 {
				fmt.Fprintf(cmd.ErrOrStderr(), "box %s: inbox empty\n", box)
				return nil
			}
			now := c.srv.Now()
			tw := table(cmd.OutOrStdout())
			fmt.Fprintln(tw, "ID\tBY\tAGE\tTEXT")
			for _, it := range items {
				fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", it.ID, it.By, age(now, it.At), clip(oneLine(it.Text.String()), 60))
			}
			return tw.Flush()
		})
	jsonFlag(cmd)
	rm := c.boxCmd("rm BOX ID", "Remove a queued follow-up", cobra.ExactArgs(2),
		func(cmd *cobra.Command, f *fleet.Fleet, box string, rest []string) error {
			id, err := strconv.ParseInt(rest[0], 10, 64)
			if err != nil {
				return fmt.Errorf("inbox item %q: want a number: %w", rest[0], fleet.ErrInvalid)
			}
			if err := f.RemoveInbox(cmd.Context(), c.actor, box, id); err != nil {
				return err
			}
			return done(cmd, "removed", map[string]any{"box": box, "inbox_id": id},
				fmt.Sprintf("removed inbox item %d of %s", id, box))
		})
	rm.GroupID = ""
	rm.Example = c.examples("inbox rm fix-the-flaky-3f2a1c 2")
	jsonFlag(rm)
	cmd.Example = c.examples("inbox fix-the-flaky-3f2a1c", "inbox --json fix-the-flaky-3f2a1c")
	cmd.AddCommand(rm)
	return cmd
}

func (c *call) diffCmd() *cobra.Command {
	var stat bool
	cmd := c.boxCmd("diff [--stat] BOX", "Show the box's change against its base commit", cobra.ExactArgs(1),
		func(cmd *cobra.Command, f *fleet.Fleet, box string, _ []string) error {
			d, err := f.Diff(cmd.Context(), c.actor, box)
			if err != nil {
				return err
			}
			if wantJSON(cmd) {
				if d.Files == nil {
					d.Files = []fleet.FileStat{}
				}
				return writeJSON(cmd.OutOrStdout(), d)
			}
			if !stat {
				_, err := io.WriteString(cmd.OutOrStdout(), d.Patch.String())
				return err
			}
			tw := table(cmd.OutOrStdout())
			added, deleted := 0, 0
			for _, fs := range d.Files {
				if fs.Binary {
					fmt.Fprintf(tw, "%s\tbinary\t\n", fs.Path.String())
					continue
				}
				added += fs.Added
				deleted += fs.Deleted
				fmt.Fprintf(tw, "%s\t+%d\t-%d\n", fs.Path.String(), fs.Added, fs.Deleted)
			}
			fmt.Fprintf(tw, "%d file(s)\t+%d\t-%d\n", len(d.Files), added, deleted)
			return tw.Flush()
		})
	cmd.Flags().BoolVar(&stat, "stat", false, "per-file added and deleted lines only")
	cmd.Example = c.examples("diff fix-the-flaky-3f2a1c > fix.patch", "diff --stat fix-the-flaky-3f2a1c", "diff --json fix-the-flaky-3f2a1c")
	jsonFlag(cmd)
	return cmd
}

// stateCmd is a command that changes a box and prints its new state.
func (c *call) stateCmd(use, short string, do func(cmd *cobra.Command, f *fleet.Fleet, box string) (fleet.Box, error)) *cobra.Command {
	cmd := c.boxCmd(use, short, cobra.ExactArgs(1), func(cmd *cobra.Command, f *fleet.Fleet, box string, _ []string) error {
		b, err := do(cmd, f, box)
		if err != nil {
			return err
		}
		if wantJSON(cmd) {
			return writeJSON(cmd.OutOrStdout(), b)
		}
		kept := ""
		if b.Keep {
			kept = " (kept)"
		}
		fmt.Fprintf(cmd.OutOrStdout(), "box %s is %s%s\n", b.Name, b.State, kept)
		return nil
	})
	jsonFlag(cmd)
	verb := cmd.Name()
	cmd.Example = c.examples(verb+" fix-the-flaky-3f2a1c", verb+" --json fix-the-flaky-3f2a1c")
	return cmd
}

func (c *call) sleepCmd() *cobra.Command {
	return c.stateCmd("sleep BOX", "Put a box to sleep (its machine ends; wake brings it back)",
		func(cmd *cobra.Command, f *fleet.Fleet, box string) (fleet.Box, error) {
			return f.Sleep(cmd.Context(), c.actor, box)
		})
}

func (c *call) wakeCmd() *cobra.Command {
	return c.stateCmd("wake BOX", "Wake a sleeping box",
		func(cmd *cobra.Command, f *fleet.Fleet, box string) (fleet.Box, error) {
			return f.Wake(cmd.Context(), c.actor, box)
		})
}

func (c *call) keepCmd(keep bool) *cobra.Command {
	use, short := "keep BOX", "Never destroy the box while it sleeps"
	if !keep {
		use, short = "unkeep BOX", "Let the sleep TTL destroy the box again"
	}
	return c.stateCmd(use, short, func(cmd *cobra.Command, f *fleet.Fleet, box string) (fleet.Box, error) {
		return f.Keep(cmd.Context(), c.actor, box, keep)
	})
}

func (c *call) rmCmd() *cobra.Command {
	cmd := c.boxCmd("rm BOX", "Destroy a box and everything in it", cobra.ExactArgs(1),
		func(cmd *cobra.Command, f *fleet.Fleet, box string, _ []string) error {
			if err := f.Destroy(cmd.Context(), c.actor, box); err != nil {
				return err
			}
			return done(cmd, "destroyed", map[string]any{"box": box}, "destroyed "+box)
		})
	cmd.Example = c.examples("rm fix-the-flaky-3f2a1c", "rm --json fix-the-flaky-3f2a1c")
	return jsonFlag(cmd)
}

func (c *call) allowCmd() *cobra.Command {
	var set bool
	cmd := c.boxCmd("allow [--set] BOX [DOMAIN[:PORT]…]", "Add egress domains a box may reach, on ports 80 and 443 or DOMAIN:PORT (--set: replace the list; no domains: show it)",
		cobra.MinimumNArgs(1),
		func(cmd *cobra.Command, f *fleet.Fleet, box string, domains []string) error {
			var b fleet.Box
			var err error
			switch {
			case set:
				b, err = f.SetAllow(cmd.Context(), c.actor, box, domains)
			case len(domains) > 0:
				b, err = f.EditAllow(cmd.Context(), c.actor, box, domains, nil)
			default:
				b, err = f.Get(cmd.Context(), c.actor, box)
			}
			if err != nil {
				return err
			}
			if wantJSON(cmd) {
				return writeJSON(cmd.OutOrStdout(), map[string]any{"box": b.Name, "allow": b.Allow})
			}
			if len(b.Allow) == 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "box %s: no extra domains\n", b.Name)
				return nil
			}
			fmt.Fprintf(cmd.OutOrStdout(), "box %s may reach: %s\n", b.Name, strings.Join(b.Allow, " "))
			return nil
		})
	cmd.Flags().BoolVar(&set, "set", false, "replace the list with exactly these domains (none: clear it)")
	cmd.Example = c.examples("allow fix-the-flaky-3f2a1c", "allow fix-the-flaky-3f2a1c @pypi", "allow fix-the-flaky-3f2a1c pypi.org '*.pythonhosted.org'",
		"allow fix-the-flaky-3f2a1c example.com:8443", "allow --set fix-the-flaky-3f2a1c")
	jsonFlag(cmd)
	return cmd
}

// age is how long ago t was, for people (the TUI's wording).
func age(now, t time.Time) string { return tui.Age(now, t) }

// when is a time for people: relative, then exact.
func when(now, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	rel := age(now, t)
	if !strings.HasPrefix(rel, "in ") {
		rel += " ago"
	}
	return rel + " (" + stamp(t) + ")"
}

// clip shortens s to n runes with an ellipsis.
func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
