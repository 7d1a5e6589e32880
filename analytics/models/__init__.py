"""Models of the analytics app, one module per job:

- `rating_counts`: `DeliveryRatingCounts`, the per-delivery rollup kept exact by triggers;
- `review`: review queues, their items and the team-scoped reviewer permission;
- `alerts`: alert rules and the alerts they fired.

State changes live next to them: `analytics.review.service`, `analytics.alerts.service`.
"""

from analytics.models.alerts import Alert, AlertRule
from analytics.models.rating_counts import DeliveryRatingCounts
from analytics.models.review import Reviewer, ReviewItem, ReviewQueue

__all__ = ["Alert", "AlertRule", "DeliveryRatingCounts", "ReviewItem", "ReviewQueue", "Reviewer"]
