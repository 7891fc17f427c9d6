// Package cli is asyrevel's command line: every command of the production
// binary (cmd/asyrevel), and what the lab binary (cmd/asyrevel-lab) builds
// its experiment command on. asyrevel hands "experiment ..." over to
// asyrevel-lab; asyrevel-lab runs every command of asyrevel and
// installs its own experiment command (Install).
package cli
