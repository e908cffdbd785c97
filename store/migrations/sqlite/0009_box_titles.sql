-- Each box's short title (fleet.DefaultTitle of its task unless a person
-- set one), in a column of its own beside the document. Rows from before
-- get the title derived from their task: the store's Go step for this
-- migration (store/titles.go) fills them in the same transaction, with the
-- core's own rule.

ALTER TABLE boxes ADD COLUMN title TEXT NOT NULL DEFAULT '';
