-- Reserved: migration 0007 belongs to another branch. This placeholder
-- only keeps the numbers without a gap on the pull-request branch; the
-- other branch's 0007 replaces it when both are merged.
SELECT 1;
