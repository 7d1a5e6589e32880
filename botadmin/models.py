"""Teams, bots, chats, policy layers, keys, tokens and the audit log.

Policy layers are stored *partial* (only the keys a layer sets) in JSON columns; their schema
and the resolver live in `botadmin.policy` (pure functions). Secrets never live in a column:
each `*_secret_ref` / `secret_ref` names a file under `CARDLOOP_SECRET_DIR` written by
`plumbing.secretstore`.
"""

from __future__ import annotations

import copy
import hashlib
import hmac
import secrets as pysecrets
from typing import ClassVar

from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models, transaction
from django.db.models.signals import post_delete, post_save
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from botadmin import accesscache
from botadmin.callbackcache import CALLBACK_BOTS
from plumbing.db.rows import columns_of, quoted_table, select_one
from plumbing.secretstore import read_secret


class Team(models.Model):
    """A locally hosted team: owns a policy layer, is bound to chats, has manager members."""

    name = models.CharField(_("name"), max_length=100, unique=True)
    description = models.TextField(_("description"), blank=True)
    policy = models.JSONField(
        _("feedback policy layer"),
        default=dict,
        blank=True,
        help_text=_("Partial layer: only the fields this team sets. Empty = inherit everything."),
    )
    members = models.ManyToManyField(
        settings.AUTH_USER_MODEL,
        through="TeamMembership",
        related_name="cardloop_teams",
        blank=True,
        verbose_name=_("members"),
        help_text=_("Managers who may read this team's analytics."),
    )
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)

    class Meta:
        ordering = ["name"]
        verbose_name = _("team")
        verbose_name_plural = _("teams")

    def __str__(self) -> str:
        return self.name


class TeamMembershipQuerySet(models.QuerySet):
    def team_ids_of(self, user_id: int) -> frozenset[int]:
        """The ids of the teams user `user_id` is a member of (empty when none): from the
        process's short-lived cache (`botadmin.accesscache`: a membership added or removed
        takes effect at once in this process and within `CARDLOOP_ACCESS_CACHE_SECONDS`,
        1 s, in the others), else one query. A user in no team is not cached, so a first team
        granted takes effect at once in every process (a refused request costs the query).
        Raises the database's errors."""
        ids = accesscache.TEAM_IDS.get(
            user_id,
            lambda: (
                frozenset(self.filter(user_id=user_id).values_list("team_id", flat=True)) or None
            ),
        )
        return ids or frozenset()


class TeamMembership(models.Model):
    """A user's membership of a team; analytics are scoped to the teams a manager is in."""

    team = models.ForeignKey(
        Team, on_delete=models.CASCADE, related_name="memberships", verbose_name=_("team")
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        related_name="team_memberships",
        verbose_name=_("user"),
    )
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)

    objects = TeamMembershipQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["team", "user"], name="team_membership_unique")
        ]
        verbose_name = _("team membership")
        verbose_name_plural = _("team memberships")

    def __str__(self) -> str:
        return f"{self.user} @ {self.team}"


class Chat(models.Model):
    """A Feishu chat (`chat_id` = `oc_…`), group or p2p."""

    class ChatType(models.TextChoices):
        GROUP = "group", _("group")
        P2P = "p2p", _("private (p2p)")

    chat_id = models.CharField(_("chat_id"), max_length=64, unique=True)
    name = models.CharField(_("name"), max_length=200, blank=True)
    chat_type = models.CharField(
        _("type"), max_length=8, choices=ChatType.choices, default=ChatType.GROUP
    )
    teams = models.ManyToManyField(
        Team, through="TeamChat", related_name="chats", blank=True, verbose_name=_("teams")
    )
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)

    class Meta:
        ordering = ["name", "chat_id"]
        verbose_name = _("chat")
        verbose_name_plural = _("chats")

    def __str__(self) -> str:
        return f"{self.name} ({self.chat_id})" if self.name else self.chat_id


class TeamChat(models.Model):
    """Binding of a chat to a team. A chat bound to two teams resolves to feedback off
    (reason `ambiguous_team`): it fails closed rather than guess whose policy applies."""

    team = models.ForeignKey(
        Team, on_delete=models.CASCADE, related_name="chat_bindings", verbose_name=_("team")
    )
    chat = models.ForeignKey(
        Chat, on_delete=models.CASCADE, related_name="team_bindings", verbose_name=_("chat")
    )
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["team", "chat"], name="team_chat_unique")]
        verbose_name = _("team ↔ chat binding")
        verbose_name_plural = _("team ↔ chat bindings")

    def __str__(self) -> str:
        return f"{self.team} ↔ {self.chat}"


class WriteOnlySecrets:
    """Model mixin for write-only secrets kept as `secret_ref`s to 0600 files
    (`plumbing.secretstore`), never as plain columns: `SECRET_FIELDS` maps each secret's name
    to the model field holding its ref. Written only by `botadmin.services.set_secret` /
    `clear_secret`."""

    #: secret name → the model field holding its ref.
    SECRET_FIELDS: ClassVar[dict[str, str]] = {}

    def secret(self, name: str) -> str:
        """The plain value of secret `name` (a key of SECRET_FIELDS), or "" when not set.
        Raises KeyError for another name."""
        return read_secret(getattr(self, self.SECRET_FIELDS[name])) or ""

    def has_secret(self, name: str) -> bool:
        """Whether secret `name` is set (its ref is; the file is not read)."""
        return bool(getattr(self, self.SECRET_FIELDS[name]))


class BotQuerySet(models.QuerySet):
    def with_credentials(self) -> BotQuerySet:
        """Bots that can call the Feishu Open API (an app secret is set)."""
        return self.exclude(app_secret_ref="")

    def for_callback(self, app_id: str) -> Bot | None:
        """The bot of a platform callback URL (`/lark/<app_id>/callback`), or None, with its
        secrets already read: from the process's cache (`botadmin.callbackcache`: a change
        of the bot takes effect at once in this process and within
        `CARDLOOP_BOT_CACHE_SECONDS`, 1 s, in the others), else one query.

        Hand-written: every callback makes this lookup, and building
        `Bot.objects.filter(app_id=app_id).first()` cost more CPU than running the statement
        (a unique column, one row); `select_one` still returns a model instance. Raises the
        database's errors (nothing is cached then).
        """
        return CALLBACK_BOTS.get(app_id, self._row_for_callback, Bot.read_secrets)

    def _row_for_callback(self, app_id: str) -> Bot | None:
        table = quoted_table(Bot)
        sql = f"SELECT {columns_of(Bot)} FROM {table} WHERE app_id = %s LIMIT 1"  # noqa: S608 - ours
        return select_one(Bot, sql, [app_id])


class Bot(WriteOnlySecrets, models.Model):
    """One Feishu/Lark app. Credentials are `secret_ref`s to files, never plain columns."""

    class Domain(models.TextChoices):
        FEISHU = "feishu", _("Feishu (open.feishu.cn)")
        LARK = "lark", _("Lark (open.larksuite.com)")

    #: secret name → the model field holding its ref.
    SECRET_FIELDS: ClassVar[dict[str, str]] = {
        "app_secret": "app_secret_ref",
        "encrypt_key": "encrypt_key_ref",
        "verification_token": "verification_token_ref",
    }

    app_id = models.CharField(
        _("app_id"),
        max_length=64,
        unique=True,
        validators=[
            RegexValidator(
                r"^[A-Za-z0-9_-]+\Z",
                _(
                    "Use the App ID from the Feishu developer console (cli_…): letters, digits, "
                    "_ and - only. It is part of the callback URL /lark/<app_id>/callback."
                ),
            )
        ],
        help_text=_("From the Feishu developer console, e.g. cli_a1b2c3d4e5f6a7b8."),
    )
    name = models.CharField(_("name"), max_length=100)
    domain = models.CharField(
        _("domain"), max_length=8, choices=Domain.choices, default=Domain.FEISHU
    )
    api_only = models.BooleanField(
        _("API only"),
        default=False,
        help_text=_("API-only bots never show feedback buttons, whatever the policy says."),
    )

    class CardLanguage(models.TextChoices):
        """The content default of Cardloop's card text (Feishu shows each reader the
        `i18n_content` of their client's language, and this one where it has none)."""

        ZH_HANS = "zh-hans", "简体中文"
        EN = "en", "English"

    card_language = models.CharField(
        _("card language"),
        max_length=8,
        choices=CardLanguage.choices,
        default=CardLanguage.ZH_HANS,
        help_text=_(
            "Cards carry Cardloop's text in Chinese and English for each reader's Feishu "
            "language; this one is shown where a reader's language is neither."
        ),
    )
    app_secret_ref = models.CharField(
        _("app secret ref"), max_length=80, blank=True, editable=False
    )
    encrypt_key_ref = models.CharField(
        _("encrypt key ref"), max_length=80, blank=True, editable=False
    )
    verification_token_ref = models.CharField(
        _("verification token ref"), max_length=80, blank=True, editable=False
    )
    policy = models.JSONField(
        _("feedback policy layer"),
        default=dict,
        blank=True,
        help_text=_("Partial layer: only the fields this bot sets. Empty = inherit everything."),
    )
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)

    objects = BotQuerySet.as_manager()

    class Meta:
        ordering = ["name"]
        verbose_name = _("bot")
        verbose_name_plural = _("bots")

    def __str__(self) -> str:
        return f"{self.name} ({self.app_id})"

    def secret(self, name: str) -> str:
        """The plain value of secret `name` (a key of SECRET_FIELDS), or "" when not set. A
        bot from `Bot.objects.for_callback` answers from the values read with its row
        (`read_secrets`); any other reads the file."""
        read = self.__dict__.get("_secret_values")
        if read is not None:
            return read[name]
        return super().secret(name)

    def read_secrets(self) -> None:
        """Read every secret of this bot now and answer `secret()` from those values (for the
        callback cache: no file read per callback)."""
        self.__dict__.pop("_secret_values", None)
        self.__dict__["_secret_values"] = {name: self.secret(name) for name in self.SECRET_FIELDS}

    @property
    def has_credentials(self) -> bool:
        """True when Cardloop can call the Open API for this bot (an app secret is set)."""
        return bool(self.app_secret_ref)


def _forget_cached_bot(sender, instance: Bot, **kwargs) -> None:
    """A bot was saved or deleted: the callback cache drops it now and once more when the
    transaction commits (a lookup between the two read the old row and must not stay)."""
    pk, app_id = instance.pk, instance.app_id
    CALLBACK_BOTS.forget_bot(pk, app_id)
    transaction.on_commit(lambda: CALLBACK_BOTS.forget_bot(pk, app_id), using=kwargs.get("using"))


post_save.connect(_forget_cached_bot, sender=Bot, dispatch_uid="botadmin.forget_cached_bot")
post_delete.connect(_forget_cached_bot, sender=Bot, dispatch_uid="botadmin.forget_cached_bot")


class SlackApp(WriteOnlySecrets, models.Model):
    """One Slack app serving a bot as its Slack channel: the app id (part of the request URLs
    `/slack/<app_id>/…`) and two write-only secrets kept as `secret_ref`s to 0600 files.

    Without a bot token the app runs in dry run (Web API calls are logged, not made).
    Secrets: the bot token (`xoxb-…`, https://api.slack.com/authentication/token-types) and
    the signing secret (https://api.slack.com/authentication/verifying-requests-from-slack).
    """

    #: secret name → the model field holding its ref.
    SECRET_FIELDS: ClassVar[dict[str, str]] = {
        "bot_token": "bot_token_ref",
        "signing_secret": "signing_secret_ref",
    }

    bot = models.OneToOneField(
        Bot, on_delete=models.CASCADE, related_name="slack_app", verbose_name=_("bot")
    )
    app_id = models.CharField(
        _("Slack app id"),
        max_length=32,
        unique=True,
        validators=[
            RegexValidator(
                r"^A[A-Z0-9]+\Z",
                _("Use the App ID from the Slack app's Basic Information page (A…)."),
            )
        ],
        help_text=_("From api.slack.com/apps → Basic Information, e.g. A0123456789."),
    )
    bot_token_ref = models.CharField(_("bot token ref"), max_length=80, blank=True, editable=False)
    signing_secret_ref = models.CharField(
        _("signing secret ref"), max_length=80, blank=True, editable=False
    )
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)

    class Meta:
        ordering = ["app_id"]
        verbose_name = _("Slack app")
        verbose_name_plural = _("Slack apps")

    def __str__(self) -> str:
        return f"{self.app_id} → {self.bot.name}"


class TelegramBot(WriteOnlySecrets, models.Model):
    """One Telegram bot serving a Cardloop bot as its Telegram channel: the bot's numeric id
    (the part of its token before ":", what `getMe` answers as `id`; part of the webhook URL
    `/telegram/<bot_user_id>/webhook`) and two write-only secrets kept as `secret_ref`s to
    0600 files.

    Without a bot token the bot runs in dry run (Bot API calls are logged, not made).
    Secrets: the bot token from @BotFather (https://core.telegram.org/bots/api#authorizing-your-bot)
    and the webhook secret Telegram sends back in `X-Telegram-Bot-Api-Secret-Token`
    (`setWebhook`'s `secret_token`: 1-256 characters of A-Z a-z 0-9 _ -,
    https://core.telegram.org/bots/api#setwebhook).
    """

    #: secret name → the model field holding its ref.
    SECRET_FIELDS: ClassVar[dict[str, str]] = {
        "bot_token": "bot_token_ref",
        "webhook_secret": "webhook_secret_ref",
    }

    bot = models.OneToOneField(
        Bot, on_delete=models.CASCADE, related_name="telegram_bot", verbose_name=_("bot")
    )
    bot_user_id = models.PositiveBigIntegerField(
        _("Telegram bot id"),
        unique=True,
        help_text=_("The number before ':' in the bot token from @BotFather, e.g. 123456789."),
    )
    username = models.CharField(
        _("Telegram username"),
        max_length=64,
        blank=True,
        default="",
        help_text=_("Without @; shown in the admin only."),
    )
    bot_token_ref = models.CharField(_("bot token ref"), max_length=80, blank=True, editable=False)
    webhook_secret_ref = models.CharField(
        _("webhook secret ref"), max_length=80, blank=True, editable=False
    )
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)

    class Meta:
        ordering = ["bot_user_id"]
        verbose_name = _("Telegram bot")
        verbose_name_plural = _("Telegram bots")

    def __str__(self) -> str:
        return f"{self.username or self.bot_user_id} → {self.bot.name}"


class ChatPolicy(models.Model):
    """The policy layer for one (bot, chat) pair: the most specific layer."""

    bot = models.ForeignKey(
        Bot, on_delete=models.CASCADE, related_name="chat_policies", verbose_name=_("bot")
    )
    chat = models.ForeignKey(
        Chat, on_delete=models.CASCADE, related_name="chat_policies", verbose_name=_("chat")
    )
    policy = models.JSONField(_("feedback policy layer"), default=dict, blank=True)
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["bot", "chat"], name="chat_policy_unique")]
        verbose_name = _("chat policy")
        verbose_name_plural = _("chat policies")

    def __str__(self) -> str:
        return f"{self.bot.name} × {self.chat}"


# ---------------------------------------------------------------------------------------------
# Hashed tokens (bot API keys, desktop tokens, manager API tokens)
# ---------------------------------------------------------------------------------------------


def _hash_token(raw: str) -> str:
    return hashlib.sha256(raw.encode("utf-8")).hexdigest()


class HashedTokenQuerySet(models.QuerySet):
    def active(self):
        return self.filter(revoked_at__isnull=True)


class HashedToken(models.Model):
    """A bearer token shown once and stored as SHA-256.

    Format: `<PREFIX_TAG>_<lookup>_<secret>`; `lookup` (8 chars) is stored in clear to find the
    row, the whole string is compared by hash with `hmac.compare_digest`.
    """

    PREFIX_TAG: ClassVar[str] = "tok"

    label = models.CharField(_("label"), max_length=100, blank=True)
    lookup = models.CharField(_("key prefix"), max_length=16, unique=True, editable=False)
    token_hash = models.CharField(_("token hash"), max_length=64, editable=False)
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    last_used_at = models.DateTimeField(_("last used"), null=True, blank=True, editable=False)
    revoked_at = models.DateTimeField(_("revoked at"), null=True, blank=True, editable=False)

    objects = HashedTokenQuerySet.as_manager()

    class Meta:
        abstract = True

    @classmethod
    def new_raw(cls) -> tuple[str, str]:
        """Return (raw token, lookup). The raw value is shown to the user once."""
        lookup = pysecrets.token_hex(4)
        raw = f"{cls.PREFIX_TAG}_{lookup}_{pysecrets.token_urlsafe(32)}"
        return raw, lookup

    @classmethod
    def _for_lookup(cls):
        """The active rows `find_active` looks in; a subclass joins what its caller reads next
        (one query instead of two on every authenticated request)."""
        return cls.objects.active()

    def set_raw(self, raw: str, lookup: str) -> None:
        self.lookup = lookup
        self.token_hash = _hash_token(raw)

    @classmethod
    def find_active(cls, raw: str):
        """The active row for `raw`, or None. Constant-time compare of the hash; never raises
        on malformed input (wrong shape, non-ASCII)."""
        if not isinstance(raw, str) or raw.count("_") < 2:
            return None
        tag, lookup, _rest = raw.split("_", 2)
        if tag != cls.PREFIX_TAG:
            return None
        row = cls._for_lookup().filter(lookup=lookup).first()
        if row is None:
            return None
        if not hmac.compare_digest(row.token_hash, _hash_token(raw)):
            return None
        return row

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None

    def touch(self) -> None:
        """Record use, at most once a minute per token (keeps the hot path write-free)."""
        now = timezone.now()
        if self.last_used_at is None or (now - self.last_used_at).total_seconds() > 60:
            type(self).objects.filter(pk=self.pk).update(last_used_at=now)
            self.last_used_at = now


class BotApiKey(HashedToken):
    """API key of the bot backend (`Authorization: Bearer clk_…`). Shown once, stored hashed."""

    PREFIX_TAG = "clk"

    bot = models.ForeignKey(
        Bot, on_delete=models.CASCADE, related_name="api_keys", verbose_name=_("bot")
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        verbose_name=_("created by"),
    )

    class Meta:
        ordering = ["-created_at"]
        verbose_name = _("bot API key")
        verbose_name_plural = _("bot API keys")

    def __str__(self) -> str:
        return f"clk_{self.lookup}_… ({self.label or self.bot.name})"

    @classmethod
    def _for_lookup(cls):
        return cls.objects.active().select_related("bot")  # every bot API call reads its bot


class DesktopToken(HashedToken):
    """Token a desktop/web question panel uses to connect as one user (`open_id` of a bot)."""

    PREFIX_TAG = "cdt"

    bot = models.ForeignKey(
        Bot, on_delete=models.CASCADE, related_name="desktop_tokens", verbose_name=_("bot")
    )
    open_id = models.CharField(_("open_id"), max_length=64)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        verbose_name=_("created by"),
    )

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["bot", "open_id"], name="desktop_token_user")]
        verbose_name = _("desktop token")
        verbose_name_plural = _("desktop tokens")

    def __str__(self) -> str:
        # Never the open_id: this string lands in audit entries and admin messages.
        return f"cdt_{self.lookup}_…" + (f" ({self.label})" if self.label else "")


#: Shortest and longest key of DRF's `authtoken` that migrates into a `ManagerToken` (DRF made
#: 40 hex characters; its column holds at most 40).
LEGACY_KEY_LENGTHS = (24, 40)
#: Characters of a migrated DRF key kept in clear as its lookup (12: never the 8 of a new
#: token's lookup, so the two kinds cannot collide; 28+ characters stay secret).
LEGACY_LOOKUP_LENGTH = 12


def legacy_lookup(raw: str) -> str | None:
    """The lookup a key of DRF's `authtoken` was migrated under, or None when `raw` does not
    have the shape of such a key (24–40 ASCII letters or digits). Pure."""
    low, high = LEGACY_KEY_LENGTHS
    if not isinstance(raw, str) or not (low <= len(raw) <= high):
        return None
    if not (raw.isascii() and raw.isalnum()):
        return None
    return raw[:LEGACY_LOOKUP_LENGTH]


class ManagerToken(HashedToken):
    """API token of a manager or reviewer (`Authorization: Token cmk_…`): a script reads the
    analytics and review API as that user, with that user's teams and permissions.

    Shown once, stored as SHA-256 like bot API keys and desktop tokens. `legacy` rows came from
    DRF's `authtoken` table (whose full keys were stored and shown): the migration stored each
    key's hash with its first `LEGACY_LOOKUP_LENGTH` characters as lookup and deleted the key,
    so those tokens keep working without a prefix of their own.
    """

    PREFIX_TAG = "cmk"

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        related_name="manager_tokens",
        verbose_name=_("user"),
        help_text=_("The token acts as this user: their teams, their reviewer permissions."),
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        verbose_name=_("created by"),
    )
    legacy = models.BooleanField(
        _("migrated key"),
        default=False,
        editable=False,
        help_text=_("Migrated from a key of the earlier token table (no cmk_ prefix)."),
    )

    class Meta:
        ordering = ["-created_at"]
        verbose_name = _("manager API token")
        verbose_name_plural = _("manager API tokens")

    def __str__(self) -> str:
        # Never the raw value: this string lands in audit entries and admin messages.
        prefix = f"{self.lookup}…" if self.legacy else f"cmk_{self.lookup}_…"
        return prefix + (f" ({self.label})" if self.label else "")

    @classmethod
    def _for_lookup(cls):
        return cls.objects.active().select_related("user")  # the token acts as its user

    @classmethod
    def find_active(cls, raw: str):
        """The active row for `raw` (`cmk_…`, or a migrated DRF key), or None. Constant-time
        hash compare; never raises on malformed input."""
        lookup = None if not isinstance(raw, str) or raw.startswith("cmk_") else legacy_lookup(raw)
        if lookup is None:
            return super().find_active(raw)
        row = cls._for_lookup().filter(lookup=lookup, legacy=True).first()
        if row is None or not hmac.compare_digest(row.token_hash, _hash_token(raw)):
            return None
        return row

    @classmethod
    def for_request(cls, raw: str) -> ManagerToken | None:
        """The active token for `raw` with its user joined, or None, for one authenticated
        request: from the process's short-lived cache keyed by the token's SHA-256
        (`botadmin.accesscache`: revoking it, or deactivating or deleting its user, takes effect
        at once in this process and within `CARDLOOP_ACCESS_CACHE_SECONDS`, 1 s, in the
        others), else `find_active` (one query). Records the use (`touch`, at most once a
        minute) when the user is active. Returns a copy of the row and of its user, so a caller
        changing an attribute changes nothing for the others. Never raises on malformed input;
        raises the database's errors."""
        if not isinstance(raw, str) or not raw:
            return None
        row = accesscache.MANAGER_TOKENS.get(_hash_token(raw), lambda: cls.find_active(raw))
        if row is None:
            return None
        if row.user.is_active:
            row.touch()  # on the shared row: its last_used_at keeps the next requests write-free
        token = copy.copy(row)
        token.user = copy.copy(row.user)
        return token


# ---------------------------------------------------------------------------------------------
# Feishu sign-in: which Feishu account is which Django user
# ---------------------------------------------------------------------------------------------


class FeishuIdentity(models.Model):
    """A Feishu account that signs in to Cardloop (OAuth web login of `bot`'s app) as `user`.

    `open_id` is the account's id in `bot`'s app; `union_id` is the same person across the
    apps of one developer, so a second sign-in bot finds the same user through it, within one
    `tenant_key` (the company). What `user` may do stays Cardloop's: team memberships and the
    reviewer permission are granted in the admin, never by signing in. State changes:
    `botadmin.services.sign_in_feishu_user`. `str()` never shows the ids.
    """

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        related_name="feishu_identities",
        verbose_name=_("user"),
    )
    bot = models.ForeignKey(
        Bot, on_delete=models.CASCADE, related_name="feishu_identities", verbose_name=_("bot")
    )
    tenant_key = models.CharField(_("tenant_key"), max_length=64)
    open_id = models.CharField(_("open_id"), max_length=64)
    union_id = models.CharField(_("union_id"), max_length=64, blank=True)
    name = models.CharField(_("name in Feishu"), max_length=100, blank=True)
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    last_login_at = models.DateTimeField(_("last sign-in"), null=True, blank=True)

    class Meta:
        ordering = ["-last_login_at", "-created_at"]
        constraints = [
            models.UniqueConstraint(fields=["bot", "open_id"], name="feishu_identity_open_id")
        ]
        indexes = [
            models.Index(fields=["tenant_key", "union_id"], name="feishu_identity_union"),
        ]
        verbose_name = _("Feishu account")
        verbose_name_plural = _("Feishu accounts")

    def __str__(self) -> str:
        return f"{self.user} @ {self.bot.app_id}"


# ---------------------------------------------------------------------------------------------
# Audit
# ---------------------------------------------------------------------------------------------


class AuditEntry(models.Model):
    """One change of a policy layer, key, token, secret or destination: who, when, what,
    before → after. Secret values never appear: secrets are recorded as "set" / "not set"."""

    created_at = models.DateTimeField(_("when"), default=timezone.now, db_index=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        verbose_name=_("who"),
    )
    actor_repr = models.CharField(_("who (as recorded)"), max_length=150, blank=True)
    action = models.CharField(_("action"), max_length=64, db_index=True)
    target_type = models.CharField(_("object type"), max_length=64)
    target_id = models.CharField(_("object id"), max_length=64)
    target_repr = models.CharField(_("object"), max_length=200)
    before = models.JSONField(_("before"), null=True, blank=True)
    after = models.JSONField(_("after"), null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["target_type", "target_id"], name="audit_target")]
        verbose_name = _("audit entry")
        verbose_name_plural = _("audit entries")

    def __str__(self) -> str:
        return (
            f"{self.created_at:%Y-%m-%d %H:%M} {self.actor_repr} {self.action} {self.target_repr}"
        )


# ---------------------------------------------------------------------------------------------
# The access cache (`botadmin.accesscache`) follows the rows it holds
# ---------------------------------------------------------------------------------------------


def _forget_now_and_on_commit(forget, pk, using) -> None:
    """Drop at once and once more when the transaction commits: a lookup between the two read
    the old rows and must not stay."""
    forget(pk)
    transaction.on_commit(lambda: forget(pk), using=using)


def _forget_cached_token(sender, instance: ManagerToken, **kwargs) -> None:
    """A manager token was saved (revoked) or deleted."""
    _forget_now_and_on_commit(accesscache.forget_token, instance.pk, kwargs.get("using"))


def _forget_cached_user(sender, instance, **kwargs) -> None:
    """A user was saved (deactivated, made superuser) or deleted."""
    _forget_now_and_on_commit(accesscache.forget_user, instance.pk, kwargs.get("using"))


def _forget_cached_membership(sender, instance: TeamMembership, **kwargs) -> None:
    """A team membership was added, changed or removed (also by deleting its team)."""
    _forget_now_and_on_commit(accesscache.forget_memberships, instance.pk, kwargs.get("using"))


for _signal in (post_save, post_delete):
    _signal.connect(
        _forget_cached_token, sender=ManagerToken, dispatch_uid="botadmin.forget_cached_token"
    )
    _signal.connect(
        _forget_cached_user,
        sender=settings.AUTH_USER_MODEL,
        dispatch_uid="botadmin.forget_cached_user",
    )
    _signal.connect(
        _forget_cached_membership,
        sender=TeamMembership,
        dispatch_uid="botadmin.forget_cached_membership",
    )
