package secrets

// ResealAllBatches is ResealAll with a chosen batch size (tests cross batch
// boundaries with few rows).
var ResealAllBatches = resealAll
