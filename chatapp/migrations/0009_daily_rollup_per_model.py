"""Daily rollups per model: a day's key becomes (day, model), beside one row for every model.

Each row kept from before sums every generation of its day, whatever its model: it becomes that
day's every-model row (model "", DailyRollup.ALL_MODELS), which is exactly what it holds, so the
unfiltered page reads the same numbers as before. It is not attributed to a model, not even on
a day whose rows all name one: a rollup outlives the rows retention purges, and which models a
purged day's answers came from is no longer known, so a guess would be written down as a fact.
Its `is_split_by_model` is False: the rollup task (chatapp/staff/rollups.py) adds the day's
per-model rows while all of its rows are still kept (their count equals the rollup's); a day
whose rows were purged keeps its every-model row alone, and the page shows its models' share as
unknown rather than as zero.
"""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("chatapp", "0008_conversation_settings"),
    ]

    operations = [
        migrations.AddField(
            model_name="dailyrollup",
            name="model",
            field=models.CharField(blank=True, default="", max_length=200),
        ),
        migrations.AddField(
            model_name="dailyrollup",
            name="is_split_by_model",
            field=models.BooleanField(default=False),
        ),
        migrations.AlterField(
            model_name="dailyrollup",
            name="day",
            field=models.DateField(),
        ),
        migrations.AlterModelOptions(
            name="dailyrollup",
            options={"ordering": ["day", "model"]},
        ),
        migrations.AddConstraint(
            model_name="dailyrollup",
            constraint=models.UniqueConstraint(fields=("day", "model"), name="daily_rollup_one_per_day_and_model"),
        ),
    ]
