-- What a run's target resolution (internal/runs/target) reads of
-- configurations.

-- ConfigurationsWithRepo returns which of the given configuration ids (all
-- of the org) contain the repo, in the order given; the order is kept
-- through WITH ORDINALITY and a duplicate id keeps its first position.
-- name: ConfigurationsWithRepo :many
SELECT c.id::text
FROM unnest(sqlc.arg(among)::uuid[]) WITH ORDINALITY AS a (id, ord)
JOIN configurations c ON c.id = a.id AND c.org_id = sqlc.arg(org_id)
JOIN configuration_repos cr ON cr.configuration_id = c.id AND cr.repo_id = sqlc.arg(repo_id)
GROUP BY c.id
ORDER BY min(a.ord);
