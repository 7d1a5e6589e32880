# Hand-written (not generated): database triggers that keep analytics_deliveryratingcounts
# exact on every insert / update / delete of feedback_latestfeedback, for PostgreSQL and
# SQLite, plus a backfill from the latest ratings already stored. See analytics/models/rating_counts.py.

from django.db import migrations

COUNTS = "analytics_deliveryratingcounts"
LATEST = "feedback_latestfeedback"
DELIVERY = "feedback_delivery"

POSTGRES_UP = f"""
CREATE OR REPLACE FUNCTION analytics_rating_counts_apply() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP IN ('UPDATE', 'DELETE') THEN
    UPDATE {COUNTS} SET
      positive = positive - (OLD.semantic = 'positive')::int,
      progress = progress - (OLD.semantic = 'progress')::int,
      negative = negative - (OLD.semantic = 'negative')::int
    WHERE delivery_id = OLD.delivery_id;
  END IF;
  IF TG_OP IN ('INSERT', 'UPDATE') THEN
    INSERT INTO {COUNTS} AS c (delivery_id, created_at, team_id, bot_id, positive, progress, negative)
    SELECT d.id, d.created_at, d.team_id, d.bot_id,
           (NEW.semantic = 'positive')::int, (NEW.semantic = 'progress')::int,
           (NEW.semantic = 'negative')::int
      FROM {DELIVERY} d WHERE d.id = NEW.delivery_id
    ON CONFLICT (delivery_id) DO UPDATE SET
      positive = c.positive + EXCLUDED.positive,
      progress = c.progress + EXCLUDED.progress,
      negative = c.negative + EXCLUDED.negative;
  END IF;
  RETURN NULL;
END $$;

CREATE TRIGGER analytics_rating_counts_insert AFTER INSERT ON {LATEST}
  FOR EACH ROW EXECUTE FUNCTION analytics_rating_counts_apply();
CREATE TRIGGER analytics_rating_counts_delete AFTER DELETE ON {LATEST}
  FOR EACH ROW EXECUTE FUNCTION analytics_rating_counts_apply();
CREATE TRIGGER analytics_rating_counts_update AFTER UPDATE ON {LATEST}
  FOR EACH ROW
  WHEN (OLD.semantic IS DISTINCT FROM NEW.semantic OR OLD.delivery_id IS DISTINCT FROM NEW.delivery_id)
  EXECUTE FUNCTION analytics_rating_counts_apply();
"""

POSTGRES_DOWN = f"""
DROP TRIGGER IF EXISTS analytics_rating_counts_insert ON {LATEST};
DROP TRIGGER IF EXISTS analytics_rating_counts_delete ON {LATEST};
DROP TRIGGER IF EXISTS analytics_rating_counts_update ON {LATEST};
DROP FUNCTION IF EXISTS analytics_rating_counts_apply();
"""

_SQLITE_ADD = f"""
  INSERT INTO {COUNTS} (delivery_id, created_at, team_id, bot_id, positive, progress, negative)
  SELECT d.id, d.created_at, d.team_id, d.bot_id,
         NEW.semantic = 'positive', NEW.semantic = 'progress', NEW.semantic = 'negative'
    FROM {DELIVERY} d WHERE d.id = NEW.delivery_id
  ON CONFLICT (delivery_id) DO UPDATE SET
    positive = positive + excluded.positive,
    progress = progress + excluded.progress,
    negative = negative + excluded.negative;
"""
_SQLITE_SUB = f"""
  UPDATE {COUNTS} SET
    positive = positive - (OLD.semantic = 'positive'),
    progress = progress - (OLD.semantic = 'progress'),
    negative = negative - (OLD.semantic = 'negative')
  WHERE delivery_id = OLD.delivery_id;
"""
SQLITE_UP = [
    f"CREATE TRIGGER analytics_rating_counts_insert AFTER INSERT ON {LATEST} BEGIN {_SQLITE_ADD} END",
    f"CREATE TRIGGER analytics_rating_counts_delete AFTER DELETE ON {LATEST} BEGIN {_SQLITE_SUB} END",
    f"CREATE TRIGGER analytics_rating_counts_update AFTER UPDATE ON {LATEST} "
    "WHEN OLD.semantic IS NOT NEW.semantic OR OLD.delivery_id IS NOT NEW.delivery_id "
    f"BEGIN {_SQLITE_SUB} {_SQLITE_ADD} END",
]
SQLITE_DOWN = [
    f"DROP TRIGGER IF EXISTS analytics_rating_counts_{op}" for op in ("insert", "delete", "update")
]

BACKFILL = f"""
INSERT INTO {COUNTS} (delivery_id, created_at, team_id, bot_id, positive, progress, negative)
SELECT d.id, d.created_at, d.team_id, d.bot_id,
       SUM(CASE WHEN lf.semantic = 'positive' THEN 1 ELSE 0 END),
       SUM(CASE WHEN lf.semantic = 'progress' THEN 1 ELSE 0 END),
       SUM(CASE WHEN lf.semantic = 'negative' THEN 1 ELSE 0 END)
  FROM {LATEST} lf JOIN {DELIVERY} d ON d.id = lf.delivery_id
 GROUP BY d.id, d.created_at, d.team_id, d.bot_id
"""


def install(apps, schema_editor):
    conn = schema_editor.connection
    with conn.cursor() as cur:
        if conn.vendor == "postgresql":
            cur.execute(POSTGRES_UP)
        elif conn.vendor == "sqlite":
            for sql in SQLITE_UP:
                cur.execute(sql)
        else:
            raise RuntimeError(f"analytics rating-count triggers: unsupported database {conn.vendor}")
        cur.execute(f"DELETE FROM {COUNTS}")
        cur.execute(BACKFILL)


def uninstall(apps, schema_editor):
    conn = schema_editor.connection
    with conn.cursor() as cur:
        if conn.vendor == "postgresql":
            cur.execute(POSTGRES_DOWN)
        else:
            for sql in SQLITE_DOWN:
                cur.execute(sql)


class Migration(migrations.Migration):
    dependencies = [("analytics", "0001_initial")]

    operations = [migrations.RunPython(install, uninstall)]
