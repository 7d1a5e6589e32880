"""Slack as a channel: a plug-in of `interactions.channels`.

| module | what |
|---|---|
| `webapi` | the slack-sdk leaf adapter (`auth.test`, `chat.postMessage` with a send key in its metadata, `chat.update`, `conversations.history`, `users.info`, `response_url`; dry run without a token) |
| `blocks` | pure Block Kit renderers and the limits checker |
| `channel` | `SlackChannel` (the `Channel` interface), registered in `InteractionsConfig.ready()` |
| `progress` | pure Block Kit renderer of progress messages with their asks as input blocks |
| `ingress` | `POST /slack/<app_id>/interactivity` and `/events`: signature over the raw bytes, dedupe, dispatcher |
| `admin` | Slack apps: app id, write-only bot token and signing secret, "check connection" |

The feedback area of final answers is the feedback app's, handed over in its `ready()` (`SlackChannel.use_feedback_renderer`).
"""
