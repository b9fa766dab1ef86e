package ledger

// The queries of a request's page that read the cluster copy.
const (
	ClusterAttemptsQueryForTest = clusterAttemptsQuery
	ClusterTrailQueryForTest    = clusterTrailQuery
)
