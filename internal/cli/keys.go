package cli

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/asyrevel/asyrevel/run"
	"github.com/asyrevel/asyrevel/schemas"
	"github.com/asyrevel/asyrevel/trust"
)

const keysUsage = `Usage:
  asyrevel keys --run R --parties Q --out DIR [--force]
                    a whole run's keys in one place: DIR/aggregator.nk,
                    DIR/party-1.nk ... (secret, mode 0600) and DIR/roster.json
  asyrevel keys --id ID --out FILE [--force]
                    one participant's own key (ID: aggregator or party-M);
                    prints its public key, the only thing to send to others
  asyrevel keys route --out FILE [--force]
                    a broker cluster's route secret (mode 0600): give it to
                    every node (asyrevel broker --route-secret FILE); a node
                    without it is refused as a route
  asyrevel keys public FILE
                    print the public key of a key file
  asyrevel keys roster --run R --out FILE [--force] ID=KEY ...
                    a roster from public keys: KEY is a public key (U...) or
                    @FILE, a file holding one
  asyrevel keys client --name NAME --out DIR [--scope predict,metrics] [--rate N]
                    [--burst N] [--valid 8760h] [--force]
                    a client token of asyrevel serve: DIR/NAME.token (secret,
                    mode 0600: give it to the client) and its SHA-256 in
                    DIR/clients.json (what serve --clients reads); also
                    --revoke NAME, and --hash-id ID (an id as the access
                    log writes it)
  asyrevel keys server-config ROSTER [--stream NAME] [--no-stream-create]
                    the authorization block of a stock nats-server
                    configuration file that admits exactly the roster's users
                    with their permissions

Each participant connects to the broker with its own key; the roster lists
who takes part and which subjects each may publish on. Keep the .nk files
secret: whoever holds one can speak for that participant.
`

func cmdKeys(args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 {
		switch args[0] {
		case "roster":
			return cmdKeysRoster(args[1:], stdout, stderr)
		case "server-config":
			return cmdKeysServerConfig(args[1:], stdout, stderr)
		case "public":
			return cmdKeysPublic(args[1:], stdout, stderr)
		case "route":
			return cmdKeysRoute(args[1:], stdout, stderr)
		case "client":
			return cmdKeysClient(args[1:], stdout, stderr)
		case "help":
			fmt.Fprint(stdout, keysUsage)
			return nil
		}
	}
	fs := newFlagSet("keys", "asyrevel keys --run R --parties Q --out DIR | --id ID --out FILE [--force]\n\n"+
		"Makes NATS nkey user keys: a whole run's (one per participant, and roster.json)\n"+
		"or one participant's own. Also: asyrevel keys client|public|roster|route|server-config (asyrevel keys help).", stderr)
	run := fs.String("run", "", "run id (letters, digits, '-' and '_'): with --parties, make a whole run's keys")
	parties := fs.Int("parties", 0, "number of parties Q (with --run)")
	id := fs.String("id", "", "make one key for this participant: aggregator or party-M")
	out := fs.String("out", "", "output folder (with --run) or key file (with --id)")
	force := fs.Bool("force", false, "replace existing files")
	route := fs.Bool("route", false, "with --run: also a broker cluster's route secret, DIR/"+trust.RouteSecretFile+" (asyrevel broker\n--route-secret)")
	auditor := fs.Bool("auditor", false, "with --run: also an auditor's key (auditor.nk) in the roster: it may read the\nrun's stream and nothing else (audit verify --nats URL --key auditor.nk)")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return fmt.Errorf("%w: unknown keys subcommand or argument %q%s (asyrevel keys help)", errUsage, pos[0], didYouMean(pos[0], []string{"client", "public", "roster", "route", "server-config"}))
	}
	if *out == "" {
		return fmt.Errorf("%w: --out is required", errUsage)
	}
	switch {
	case *id != "" && (*run != "" || *parties != 0):
		return fmt.Errorf("%w: --id makes one key; --run and --parties make a whole run's: give one or the other", errUsage)
	case *id != "":
		return keysOne(*id, *out, *force, stdout, stderr)
	case *run == "" || *parties == 0:
		return fmt.Errorf("%w: give --run and --parties for a whole run's keys, or --id for one participant's key", errUsage)
	}
	if err := schemas.CheckRun(*run); err != nil {
		return fmt.Errorf("%w: --run: %v", errUsage, err)
	}
	if *parties < 1 || *parties > schemas.MaxParties {
		return fmt.Errorf("%w: --parties must be 1..%d, got %d", errUsage, schemas.MaxParties, *parties)
	}
	if !*route {
		return keysRun(*run, *parties, *out, *force, *auditor, stdout)
	}
	// Refused before anything is written, as the keys are.
	path := filepath.Join(*out, trust.RouteSecretFile)
	if _, err := os.Lstat(path); err == nil && !*force {
		return fmt.Errorf("%s exists (use --force to replace the run's keys)", path)
	}
	if err := keysRun(*run, *parties, *out, *force, *auditor, stdout); err != nil {
		return err
	}
	if err := trust.WriteRouteSecret(path, *force); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "route secret of the broker cluster's nodes: %s (asyrevel broker --route-secret %s)\n", path, path)
	return nil
}

func cmdKeysRoute(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("keys route", "asyrevel keys route --out FILE [--force]\n\n"+
		"Makes a broker cluster's route secret (mode 0600). Every node of the cluster gets\n"+
		"the same (asyrevel broker --cluster-name C --routes ... --route-secret FILE); a\n"+
		"node that does not present it is refused as a route. Keep it as secret as a key:\n"+
		"a node admitted as a route reads every stream of the cluster.", stderr)
	out := fs.String("out", "", "the secret's file, e.g. route.secret")
	force := fs.Bool("force", false, "replace an existing file")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, pos[0])
	}
	if *out == "" {
		return fmt.Errorf("%w: --out is required", errUsage)
	}
	if err := trust.WriteRouteSecret(*out, *force); err != nil {
		if errors.Is(err, os.ErrExist) {
			return fmt.Errorf("%s exists (use --force to replace it; then every node needs the new one)", *out)
		}
		return err
	}
	fmt.Fprintf(stdout, "route secret: %s (give it to every node: asyrevel broker --route-secret %s)\n", *out, *out)
	return nil
}

// keysRun writes a whole run's keys and roster into dir.
func keysRun(run string, q int, dir string, force, auditor bool, stdout io.Writer) error {
	ids := []string{trust.AggregatorID}
	for m := 1; m <= q; m++ {
		ids = append(ids, trust.PartyID(m))
	}
	if auditor {
		ids = append(ids, trust.AuditorID)
	}
	paths := make([]string, len(ids))
	for i, id := range ids {
		paths[i] = filepath.Join(dir, id+".nk")
	}
	rosterPath := filepath.Join(dir, "roster.json")
	// Refuse before writing anything: no half-replaced key sets.
	if !force {
		for _, p := range append(paths, rosterPath) {
			if _, err := os.Lstat(p); err == nil {
				return fmt.Errorf("%s exists (use --force to replace the run's keys)", p)
			} else if !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	roster, keys, err := trust.GenerateRun(run, q)
	if err != nil {
		return err
	}
	if auditor {
		k, err := trust.GenerateKey()
		if err != nil {
			return err
		}
		keys = append(keys, k)
		roster, err = trust.NewRosterWithAuditors(run, roster.Participants, []trust.Participant{{ID: trust.AuditorID, PublicKey: k.PublicKey()}})
		if err != nil {
			return err
		}
	}
	for _, k := range keys {
		defer k.Wipe()
	}
	for i, k := range keys {
		if err := trust.WriteKeyFile(paths[i], k, force); err != nil {
			return err
		}
	}
	if err := roster.WriteFile(rosterPath, force); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "run %s: %d keys and %s\n", run, len(ids), rosterPath)
	for i, id := range ids {
		fmt.Fprintf(stdout, "  %-12s %s  %s\n", id, keys[i].PublicKey(), paths[i])
	}
	fmt.Fprintln(stdout, "Give each participant its own .nk file (secret) and everyone roster.json.")
	return nil
}

// keysOne writes one participant's key to path and prints its public key.
func keysOne(id, path string, force bool, stdout, stderr io.Writer) error {
	if _, _, err := trust.ParseID(id); err != nil {
		return fmt.Errorf("%w: --id: %v", errUsage, err)
	}
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return fmt.Errorf("%w: --out %s is a folder; with --id it names the key file, e.g. %s", errUsage, path, filepath.Join(path, id+".nk"))
	}
	k, err := trust.GenerateKey()
	if err != nil {
		return err
	}
	defer k.Wipe()
	if err := trust.WriteKeyFile(path, k, force); err != nil {
		return err
	}
	fmt.Fprintln(stdout, k.PublicKey())
	fmt.Fprintf(stderr, "%s: secret key in %s (mode 0600). Send the public key above to whoever assembles the roster:\n"+
		"  asyrevel keys roster --run R --out roster.json %s=%s ...\n", id, path, id, k.PublicKey())
	return nil
}

func cmdKeysPublic(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("keys public", "asyrevel keys public FILE\n\nPrints the public key of the key (seed) file FILE.", stderr)
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return fmt.Errorf("%w: keys public takes one key FILE", errUsage)
	}
	k, err := trust.ReadKeyFile(pos[0])
	if err != nil {
		return err
	}
	defer k.Wipe()
	fmt.Fprintln(stdout, k.PublicKey())
	return nil
}

func cmdKeysRoster(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("keys roster", "asyrevel keys roster --run R --out FILE [--force] ID=KEY ...\n\n"+
		"Assembles a run's roster from public keys only. ID is aggregator or party-M (parties\n"+
		"numbered 1..Q without holes); KEY is a public key (U...) or @FILE, a file holding one\n"+
		"(as asyrevel keys --id prints it).", stderr)
	run := fs.String("run", "", "run id (letters, digits, '-' and '_')")
	out := fs.String("out", "", "roster file to write, e.g. roster.json")
	force := fs.Bool("force", false, "replace an existing file")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if *run == "" || *out == "" {
		return fmt.Errorf("%w: keys roster needs --run and --out", errUsage)
	}
	if err := schemas.CheckRun(*run); err != nil {
		return fmt.Errorf("%w: --run: %v", errUsage, err)
	}
	if len(pos) < 2 {
		return fmt.Errorf("%w: keys roster needs ID=KEY for the aggregator and every party", errUsage)
	}
	var ps []trust.Participant
	for _, arg := range pos {
		id, val, ok := strings.Cut(arg, "=")
		if !ok || val == "" {
			return fmt.Errorf("%w: %q: want ID=KEY or ID=@FILE", errUsage, arg)
		}
		if _, _, err := trust.ParseID(id); err != nil {
			return fmt.Errorf("%w: %q: %v", errUsage, arg, err)
		}
		key, err := publicKeyArg(val)
		if err != nil {
			return fmt.Errorf("%s: %w", id, err)
		}
		ps = append(ps, trust.Participant{ID: id, PublicKey: key})
	}
	roster, err := trust.NewRoster(*run, ps)
	if err != nil {
		return err
	}
	if err := roster.WriteFile(*out, *force); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "roster of run %s: the aggregator and %d parties, in %s\n", *run, roster.Parties(), *out)
	return nil
}

// publicKeyArg reads a public key given as such or as @FILE.
func publicKeyArg(val string) (string, error) {
	if path, ok := strings.CutPrefix(val, "@"); ok {
		data, err := os.ReadFile(path)
		if err != nil {
			return "", err
		}
		key := strings.TrimSpace(string(data))
		if strings.HasPrefix(key, "SU") || strings.Contains(key, "NKEY SEED") {
			return "", fmt.Errorf("%s holds a secret seed, not a public key: send only the public key (asyrevel keys public %s prints it)", path, path)
		}
		if strings.ContainsAny(key, " \n") {
			return "", fmt.Errorf("%s should hold one public key (U...) and nothing else", path)
		}
		val = key
	}
	if _, err := trust.ParsePublicKey(val); err != nil {
		return "", err
	}
	return val, nil
}

func cmdKeysServerConfig(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("keys server-config", "asyrevel keys server-config ROSTER [--stream NAME] [--no-stream-create] [--max-msg SIZE]\n\n"+
		"Prints a stock nats-server configuration for the roster's run: its largest message\n"+
		"(max_payload: the run's largest as the roster tells, the alignment's chunks, about\n"+
		"600 KB; a stock server takes 1 MB by default) and the authorization block: exactly the\n"+
		"roster's users, each with its permissions (a party publishes only on its own subjects\n"+
		"and reads only its replies and the control subject through consumers of its own; nobody\n"+
		"can delete, purge or change the stream). Anonymous connections are refused. Paste it\n"+
		"into a configuration that enables JetStream; each participant then connects with its\n"+
		"key file and the inbox prefix the block names. The same block serves every transport\n"+
		"design (--transport capture, ordered, acked) and every node of a cluster; nats-server\n"+
		"2.9 or newer. The aggregator creates the run's stream (parties wait for it), unless\n"+
		"--no-stream-create: then create it yourself before the run.", stderr)
	stream := fs.String("stream", "", "the run's stream (default ASYREVEL_<run>)")
	noCreate := fs.Bool("no-stream-create", false, "do not let the aggregator create the stream (add a user of your\nown that creates it before the run)")
	var maxMsg sizeFlag
	fs.Var(&maxMsg, "max-msg", "the largest message the server takes (max_payload; default: the run's largest\nas its roster tells)")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return fmt.Errorf("%w: keys server-config takes one ROSTER file", errUsage)
	}
	roster, err := trust.ReadRoster(pos[0])
	if err != nil {
		return err
	}
	// The runtimes' needs: their consumers, stream info (trust.RunPolicy).
	pol := trust.RunPolicy(roster, !*noCreate)
	pol.Stream = *stream
	grants, err := roster.Grants(pol)
	if err != nil {
		return err
	}
	if maxMsg < 0 {
		return fmt.Errorf("%w: --max-msg takes a size (e.g. 2MB)", errUsage)
	}
	payload := int64(run.RosterMaxMessage(roster))
	if maxMsg > 0 {
		payload = int64(maxMsg)
	}
	// Nothing larger than the run's largest message: the aggregator
	// makes the run's stream as small-bounded (its own run's largest).
	_, err = fmt.Fprintf(stdout, "# asyrevel run %s: its largest message, with a margin\nmax_payload: %d\n%s", roster.Run, payload, trust.AuthorizationBlock(roster.Run, grants))
	return err
}
