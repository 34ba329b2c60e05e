-- Node labels, in two homes: what the node's agent.yaml says (replaced on
-- each registration) and what an operator set with `llmgw ctl node label`
-- (kept across registrations; wins over the node's own).
ALTER TABLE nodes ADD COLUMN labels jsonb NOT NULL DEFAULT '{}';
ALTER TABLE nodes ADD COLUMN operator_labels jsonb NOT NULL DEFAULT '{}';
