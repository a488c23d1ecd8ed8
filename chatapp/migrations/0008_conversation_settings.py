from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("chatapp", "0007_generation_context_from_message"),
    ]

    operations = [
        migrations.AddField(
            model_name="conversation",
            name="model",
            field=models.CharField(blank=True, max_length=200),
        ),
        migrations.AddField(
            model_name="conversation",
            name="temperature",
            field=models.FloatField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="conversation",
            name="top_p",
            field=models.FloatField(blank=True, null=True),
        ),
    ]
