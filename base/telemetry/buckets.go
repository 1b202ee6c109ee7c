package telemetry

// SecondsBuckets are the bucket bounds of Lucius's latency histograms, in
// seconds: from a few milliseconds (a callback, a publish) to hours (a
// long job). The exporter's default bounds (0, 5, 10, … 10000) suit
// milliseconds and would put every sub-second latency in one bucket.
var SecondsBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 14400}
