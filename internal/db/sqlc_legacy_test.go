package db

// legacySQL is the hand-written SQL not yet moved to its table's owner
// (file → tables its statements name). It only shrinks:
// TestNoSQLOutsideOwners fails on SQL missing from it and on entries that no
// longer hold.
var legacySQL = map[string][]string{}
