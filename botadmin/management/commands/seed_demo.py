"""`python manage.py seed_demo`: idempotent demo data for a fresh machine (`make run` calls it).

Creates what is missing and leaves what exists as it is (edits made in the admin survive a
re-run): two teams, two bots (`cli_demo_bot` without credentials, so it runs in dry run, and the
API-only `cli_demo_api_only`), three chats and policy layers that show inheritance:

- team "Demo team" turns feedback on and sets negative reasons and the comment placeholder;
- bot `cli_demo_bot` allows reselect and lowers the comment max length (overrides defaults);
- the chat policy (cli_demo_bot, oc_demo_team_chat) requires a comment and lets everyone vote
  (overrides the team's comment settings field by field);
- the chat policy (cli_demo_bot, oc_demo_p2p) turns feedback on for a chat with no team;
- `oc_demo_shared` is bound to both teams, so feedback there is off (`ambiguous_team`);
- `C0DEMOSLACK`, a Slack channel of the demo bot's Slack app, is bound to "Demo team"
  (feedback on, requester audience).

With DEBUG only (the demo flow of the README): an API key for `cli_demo_bot` is printed once
when created (stored hashed: later runs say that one exists, `--new-key` revokes the demo keys
and prints a fresh one); the demo bot gets a demo Verification Token and Encrypt Key (never
printed; `lark_replay` reads them) so replayed clicks pass the ingress while every Feishu call
stays a dry run (no app secret); the demo bot gets a Slack app `A0DEMOSLACK` with a demo
signing secret and no bot token (Slack dry run; `slack_replay` signs with that secret); a
demo superuser is created and its login printed. All changes
go through `botadmin.services` (audited as `seed_demo`).

Then the seeders other apps registered (`botadmin.demo`) run: analytics adds a small
history (a few thousand deliveries over 30 days with ratings, comments, failures and an
incident), a review queue, an alert rule and the alerts its history fired.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import transaction

from botadmin import demo, services
from botadmin.models import Bot, BotApiKey, Chat, ChatPolicy, SlackApp, Team

ACTOR = "seed_demo"
KEY_LABEL = "seed_demo"
DEMO_USERNAME = "admin"
DEMO_PASSWORD = "cardloop-demo"  # noqa: S105 - printed on purpose; DEBUG only
#: Callback secrets of the demo bot (DEBUG only): lark_replay signs with them; no app secret,
#: so every Feishu call stays a dry run.
DEMO_CALLBACK_SECRETS = {
    "verification_token": "vt_cardloop_demo",
    "encrypt_key": "cardloop-demo-encrypt-key",
}

#: The demo bot's Slack app (DEBUG only): a demo signing secret for `slack_replay` and no bot
#: token, so every Slack call stays a dry run.
DEMO_SLACK_APP_ID = "A0DEMOSLACK"
DEMO_SLACK_SIGNING_SECRET = "cardloop-demo-slack-signing-secret"  # noqa: S105 - DEBUG only
DEMO_SLACK_CHANNEL = "C0DEMOSLACK"

TEAMS = [
    (
        "Demo team",
        "Demo data: turns feedback on for its chats.",
        {
            "enabled": True,
            "negative_followup": {
                "reasons": [
                    {"key": "wrong_facts", "label": "事实错误"},
                    {"key": "incomplete", "label": "不完整"},
                    {"key": "off_topic", "label": "答非所问"},
                ],
                "comment": {"placeholder": "哪里需要改进？"},
            },
        },
    ),
    ("Second demo team", "Demo data: shares one chat with Demo team.", {"allow_reselect": False}),
]
BOTS = [
    (
        "cli_demo_bot",
        "Demo bot",
        False,
        {"allow_reselect": True, "negative_followup": {"comment": {"max_length": 500}}},
    ),
    ("cli_demo_api_only", "Demo API-only bot", True, {"enabled": True}),
]
CHATS = [
    ("oc_demo_team_chat", "Demo team chat", Chat.ChatType.GROUP, ["Demo team"]),
    (
        "oc_demo_shared",
        "Shared chat (two teams)",
        Chat.ChatType.GROUP,
        ["Demo team", "Second demo team"],
    ),
    ("oc_demo_p2p", "Demo p2p chat", Chat.ChatType.P2P, []),
    (DEMO_SLACK_CHANNEL, "Demo Slack channel", Chat.ChatType.GROUP, ["Demo team"]),
]
CHAT_POLICIES = [
    (
        "cli_demo_bot",
        "oc_demo_team_chat",
        {"audience": "everyone", "negative_followup": {"comment": {"required": True}}},
    ),
    ("cli_demo_bot", "oc_demo_p2p", {"enabled": True}),
]


class Command(BaseCommand):
    help = "Create demo teams, bots, chats, policy layers and an API key (idempotent)."

    def add_arguments(self, parser):
        parser.add_argument(
            "--new-key",
            action="store_true",
            help="Revoke the demo bot's seed_demo keys and print a fresh one.",
        )

    def line(self, text: str) -> None:
        """One progress line of a registered seeder, shown at once."""
        self.stdout.write(f"  {text}")
        self.stdout.flush()

    def say(self, what: str, created: bool) -> None:
        state = self.style.SUCCESS("created") if created else "exists, left as is"
        self.stdout.write(f"  {what}: {state}")

    def handle(self, *args, new_key: bool = False, **options):
        self.stdout.write("Seeding demo data ...")
        with transaction.atomic():
            teams = {
                name: self._team(name, description, layer) for name, description, layer in TEAMS
            }
            bots = {
                app_id: self._bot(app_id, name, api_only, layer)
                for app_id, name, api_only, layer in BOTS
            }
            chats = {
                chat_id: self._chat(chat_id, name, chat_type, [teams[t] for t in team_names])
                for chat_id, name, chat_type, team_names in CHATS
            }
            for app_id, chat_id, layer in CHAT_POLICIES:
                self._chat_policy(bots[app_id], chats[chat_id], layer)
            if settings.DEBUG:
                self._api_key(bots["cli_demo_bot"], new_key)
                self._callback_secrets(bots["cli_demo_bot"])
                self._slack_app(bots["cli_demo_bot"])
            else:
                self.stdout.write(
                    "  demo API key: skipped (DEBUG is off; issue one in the admin at "
                    "/admin/botadmin/botapikey/add/)"
                )
        self._superuser()
        for name, seeder in demo.seeders():
            self.stdout.write(f"Seeding {name} demo data ...")
            seeder(self.line)
        self.stdout.write(self.style.SUCCESS("Demo data ready."))

    def _team(self, name, description, layer) -> Team:
        team = Team.objects.filter(name=name).first()
        created = team is None
        if created:
            team = services.save_team(ACTOR, Team(name=name, description=description))
            services.set_policy_layer(ACTOR, team, layer)
        self.say(f"team {name!r}", created)
        return team

    def _bot(self, app_id, name, api_only, layer) -> Bot:
        bot = Bot.objects.filter(app_id=app_id).first()
        created = bot is None
        if created:
            bot = services.save_bot(ACTOR, Bot(app_id=app_id, name=name, api_only=api_only))
            services.set_policy_layer(ACTOR, bot, layer)
        note = " (API only)" if api_only else " (no credentials: dry run)"
        self.say(f"bot {app_id}{note}", created)
        return bot

    def _chat(self, chat_id, name, chat_type, teams) -> Chat:
        chat = Chat.objects.filter(chat_id=chat_id).first()
        created = chat is None
        if created:
            chat = services.save_chat(ACTOR, Chat(chat_id=chat_id, name=name, chat_type=chat_type))
            for team in teams:
                services.bind_team_chat(ACTOR, team, chat)
        bound = ", ".join(chat.teams.order_by("name").values_list("name", flat=True)) or "no team"
        self.say(f"chat {chat_id} [{bound}]", created)
        return chat

    def _chat_policy(self, bot, chat, layer) -> None:
        created = not ChatPolicy.objects.filter(bot=bot, chat=chat).exists()
        if created:
            services.set_chat_policy(ACTOR, bot, chat, layer)
        self.say(f"chat policy {bot.app_id} × {chat.chat_id}", created)

    def _api_key(self, bot, new_key: bool) -> None:
        existing = list(BotApiKey.objects.active().filter(bot=bot, label=KEY_LABEL))
        if existing and not new_key:
            prefixes = ", ".join(services.key_prefix(k) for k in existing)
            self.stdout.write(
                f"  API key for {bot.app_id}: exists ({prefixes}); it was shown once when created.\n"
                f"    New one: python manage.py seed_demo --new-key, or the admin at "
                f"/admin/botadmin/botapikey/add/?bot={bot.pk}"
            )
            return
        for key in existing:
            services.revoke_api_key(ACTOR, key)
            self.stdout.write(f"  API key {services.key_prefix(key)}: revoked")
        raw, _key = services.issue_api_key(ACTOR, bot, KEY_LABEL)
        self.stdout.write(
            f"  API key for {bot.app_id}: {self.style.SUCCESS('created')}\n"
            f"    {raw}\n"
            f"    Shown only now (stored hashed). Use: Authorization: Bearer <key>"
        )

    def _callback_secrets(self, bot) -> None:
        """Demo Verification Token / Encrypt Key for `lark_replay` (only where none is set, so
        real values entered in the admin survive); not printed."""
        created = False
        for name, value in DEMO_CALLBACK_SECRETS.items():
            if not bot.has_secret(name):
                services.set_bot_secret(ACTOR, bot, name, value)
                created = True
        self.say(f"callback secrets of {bot.app_id} (for lark_replay)", created)

    def _slack_app(self, bot) -> None:
        """The demo bot's Slack app in dry run (no bot token) with a demo signing secret for
        `slack_replay` (only where none is set); the secret is not printed."""
        app = SlackApp.objects.filter(bot=bot).first()
        created = app is None
        if created:
            app = services.save_slack_app(ACTOR, SlackApp(bot=bot, app_id=DEMO_SLACK_APP_ID))
        if not app.has_secret("signing_secret"):
            services.set_slack_secret(ACTOR, app, "signing_secret", DEMO_SLACK_SIGNING_SECRET)
        self.say(f"Slack app {app.app_id} of {bot.app_id} (no bot token: dry run)", created)

    def _superuser(self) -> None:
        if not settings.DEBUG:
            self.stdout.write(
                "  demo superuser: skipped (DEBUG is off; use manage.py createsuperuser)"
            )
            return
        User = get_user_model()
        user = User.objects.filter(username=DEMO_USERNAME).first()
        if user is None:
            User.objects.create_superuser(DEMO_USERNAME, "", DEMO_PASSWORD)
            self.say(f"demo superuser {DEMO_USERNAME!r}", True)
        else:
            self.say(f"demo superuser {DEMO_USERNAME!r}", False)
        if User.objects.get(username=DEMO_USERNAME).check_password(DEMO_PASSWORD):
            self.stdout.write(
                f"  Admin: /admin/ (the full URL is printed when the server starts) — "
                f"login {DEMO_USERNAME} / {DEMO_PASSWORD}"
            )
        else:
            self.stdout.write(f"  Admin: /admin/ — user {DEMO_USERNAME!r} has its own password")
