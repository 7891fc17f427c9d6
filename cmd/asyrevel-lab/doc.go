// Command asyrevel-lab is asyrevel with the lab: every command of asyrevel
// and "asyrevel-lab experiment ...", the reference loops, the transport
// comparisons, the WAN proxies, the rogue client and the paper's tables
// and figures (packages experiment, adversary and internal/wan, which the
// production binary does not ship). "asyrevel experiment ..." hands over
// to this binary when it is beside asyrevel or on PATH; make lab builds
// it as bin/asyrevel-lab.
//
// Run "asyrevel-lab experiment help" for the experiments.
package main
