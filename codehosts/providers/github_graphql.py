"""The GraphQL documents the GitHub provider sends (``codehosts.providers.github``): the
calls REST has no operation for (the merge queue, draft or ready), the one that reads a
commit's checks and statuses in one query, and a pull request's merge queue entry. The stand-in checks each against GitHub's
published schema (tests/github_standin/graphql_api.py)."""

ENQUEUE = """mutation($id: ID!, $head: GitObjectID) {
  enqueuePullRequest(input: {pullRequestId: $id, expectedHeadOid: $head}) {
    mergeQueueEntry { id position state }
  }
}"""
DEQUEUE = """mutation($id: ID!) {
  dequeuePullRequest(input: {id: $id}) { mergeQueueEntry { id position state } }
}"""
# A pull request's place in its target's merge queue, and the merge group GitHub built for
# it there (null when it is not queued).
ENTRY = """query($owner: String!, $name: String!, $number: Int!) {
  repository(owner: $owner, name: $name) {
    pullRequest(number: $number) {
      mergeQueueEntry { id position state headCommit { oid } baseCommit { oid } }
    }
  }
}"""
ROLLUP = """query($owner: String!, $name: String!, $oid: GitObjectID!, $after: String) {
  repository(owner: $owner, name: $name) {
    object(oid: $oid) {
      ... on Commit {
        statusCheckRollup {
          contexts(first: 100, after: $after) {
            pageInfo { hasNextPage endCursor }
            nodes {
              __typename
              ... on CheckRun { name status conclusion databaseId }
              ... on StatusContext { context state }
            }
          }
        }
      }
    }
  }
}"""
# A commit status's state as the seam says it (a check run's conclusion, lower-cased).
STATUS_STATES = {
    "SUCCESS": "success",
    "FAILURE": "failure",
    "ERROR": "error",
    "PENDING": "pending",
    "EXPECTED": "pending",
}
READY = """mutation($id: ID!) {
  markPullRequestReadyForReview(input: {pullRequestId: $id}) { pullRequest { isDraft } }
}"""
DRAFT = """mutation($id: ID!) {
  convertPullRequestToDraft(input: {pullRequestId: $id}) { pullRequest { isDraft } }
}"""
