"""Pure renderers: `interaction_cards` (an interaction as Feishu Card JSON 2.0 or the text
fallback) and `progress_cards` (a session's progress card)."""
