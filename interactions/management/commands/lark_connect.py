"""`python manage.py lark_connect <app_id>`: receive one app's callbacks and events over
Feishu's long connection (`lark.ws.Client`) instead of the HTTP callback URL.

The frames go to the same dispatcher as `POST /lark/<app_id>/callback` (dedupe, registry,
budget, held card updates); see `interactions.channels.feishu.ws`. Run one process per app; pick
"long connection" as the subscription mode in the app's developer console (and publish a new
app version). Blocks until stopped (Ctrl-C / SIGTERM end the process).
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from botadmin.models import Bot


class Command(BaseCommand):
    help = "Run the Feishu long connection for one app into Cardloop's dispatcher."

    def add_arguments(self, parser):
        parser.add_argument("app_id", help="The bot's app_id (cli_…).")

    def handle(self, *args, app_id, **options):
        bot = Bot.objects.filter(app_id=app_id).first()
        if bot is None:
            raise CommandError(f"No bot with app_id {app_id!r}.")
        if not bot.has_credentials:
            raise CommandError(f"Bot {app_id} has no app secret; the long connection needs it.")
        # imported here: lark-oapi takes seconds to import; `manage.py help` should not wait
        from interactions.channels.feishu import ws

        self.stdout.write(f"Connecting {app_id} to Feishu (long connection); Ctrl-C stops.")
        try:
            ws.run_forever(bot)
        except ws.LongConnectionRefused as error:
            raise CommandError(
                f"Feishu refused the long connection for {app_id}: {error}"
            ) from None
