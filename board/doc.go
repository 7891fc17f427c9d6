// Package board is the live page of a run (asyrevel train|aggregator
// --board ADDR) and the same page written as OUT/report.html at the end.
//
// The page is one HTML file with its style and script, embedded in the
// binary (go:embed): it loads nothing from elsewhere and works offline.
// Live, it polls api/state (package observe's State, the curve from the
// points it has on) every second and draws the learning curves in SVG,
// each party's steps, lag and staleness, the privacy budget spent and
// its bound, the stream's size and bound, the recoveries, the trust
// layer's state and the events (a party that departed, the broker's
// outages, resumes, rejections). A report is the same page with the last
// State inlined in place of the polling.
package board
