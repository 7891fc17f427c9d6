// Package align is private entity alignment: the organisations of a run
// (the aggregator, which holds the labels, and the parties) find the rows
// they all hold by one or more key columns, without showing each other a
// single key, before they train.
//
// The protocol is ECDH private set intersection on ristretto255 with the
// RFC 9380 hash-to-group of cloudflare/circl, the aggregator as the hub
// (Run): each organisation hashes its normalised keys to the group,
// raises them to an ephemeral secret scalar and sends them shuffled; the
// hub raises each party's set to its scalar, each party raises the hub's
// and sends it back truncated in the hub's order; the hub matches and
// sends each party the positions of its rows of the intersection in one
// random common order. Every message travels over the run's broker
// (package broker) on the subjects asyrevel.R.psi.m and asyrevel.R.psih.m
// (package schemas), signed and chained by its sender and verified by its
// receiver (package trust), so the run's stream is the audited log of the
// alignment too. docs/align.md states what each organisation learns.
//
// A peer that breaks the protocol (a malformed message, a non-group
// element, a wrong length) is an error wrapping ErrPeer that names it; a
// silent one, after Config.Timeout, ErrTimeout; a failing organisation
// tells the others why (ErrAborted). Nothing blocks without a bound.
//
// ReadCSV reads an organisation's file, WriteFolder and WriteOwn write the
// aligned rows as a split folder (package dataset) or one organisation's
// part of it, with the digest of the order (OrderDigest) that the
// organisations compare. The align experiment (package experiment) measures it.
package align
