from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('chatapp', '0006_generation_cancelled_by_admin'),
    ]

    operations = [
        migrations.AddField(
            model_name='generation',
            name='context_from_message_id',
            field=models.PositiveBigIntegerField(blank=True, null=True),
        ),
    ]
